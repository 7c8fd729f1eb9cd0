"""Exceptions a user can cause. Each names the op, shapes, dtypes and, where known,
the user's source line (``where``)."""
from __future__ import annotations


class AxleError(Exception):
    """Base class of every error axle raises for bad input."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(message + (f"\n  at {where}" if where else ""))

    def locate(self, where: str | None) -> AxleError:
        """Sets ``where`` when the raiser could not know it (an error from the IR's shape
        rules met inside a user's call); returns self, to re-raise."""
        if self.where is None and where:
            self.where = where
            self.args = (f"{self.message}\n  at {where}",)
        return self


class ShapeError(AxleError, ValueError):
    """Operand shapes that an op cannot accept."""


class DTypeError(AxleError, TypeError):
    """Operand dtypes that an op refuses."""


class ArgumentError(AxleError, ValueError, TypeError):
    """A Python argument of a frontend function (a shape, axis, size, step, stride) of the
    wrong type or value. Both a ValueError and a TypeError, as NumPy raises either."""


class OutOfBoundsError(AxleError, IndexError):
    """An index out of range: a concrete one at once, a traced one under --check_indices."""


class OpAttributeError(AxleError, ValueError):
    """An op attribute that is missing or invalid."""


class VerifierError(AxleError):
    """A malformed module (a node whose recorded type disagrees with its op's rules...)."""


class ParseError(AxleError, ValueError):
    """IR text that does not parse; ``line`` and ``column`` (1-based) locate it when known."""

    def __init__(self, message: str, *, where: str | None = None, line: int | None = None,
                 column: int | None = None) -> None:
        super().__init__(message, where=where)
        self.line = line
        self.column = column


class TracingError(AxleError):
    """Python control flow on a traced value, or another misuse of tracing."""


class DeviceError(AxleError, LookupError):
    """An unknown or unavailable device name."""


class BackendError(AxleError):
    """A backend that failed to load, compile or run."""


class PlacementError(AxleError):
    """Strict placement: an op the device cannot run."""


class CustomCallError(AxleError, RuntimeError):
    """A registered custom-call target that raised on its operands (the cause is chained)."""


# The names of 0.1, kept for code that catches them; removed in the next minor version.
AttributeError_ = OpAttributeError
IndexError_ = OutOfBoundsError


class CollectiveError(AxleError, RuntimeError):
    """A collective run over replicas it does not fit (replica groups naming more replicas
    than the run has, a replica that failed or never reached the collective)."""
