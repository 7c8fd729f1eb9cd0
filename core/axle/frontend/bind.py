"""``bind``: the single entry point through which every primitive is applied, staged into
the current trace (tracing.py) or run eagerly on a device (eager.py)."""
from __future__ import annotations

from typing import Any

from ..errors import AxleError, TracingError
from ..ir.builder import make_node
from ..ir.ops import Op
from .eager import apply_eager
from .source import user_location
from .tracing import OPEN_SCOPES, Tracer, aval_of, current_trace
from .validate import is_out_of_memory, out_of_memory_error


def bind(op: Op, *operands: Any, **attrs: Any) -> Any:
    """Applies a primitive: staged into the current trace, or run eagerly on a device."""
    trace = current_trace() if OPEN_SCOPES[0] else None  # (no trace open in any thread: none here)
    if trace is None:
        for x in operands:
            if isinstance(x, Tracer):
                trace = x.trace
                break
    if trace is not None:
        if not trace.active:
            raise TracingError("a traced value escaped its jit function and was used after tracing ended",
                               where=user_location())
        loc = user_location()
        nodes = [trace.to_node(x, op.value) for x in operands]
        return Tracer(trace, make_node(op, nodes, attrs, loc=loc))
    try:
        return apply_eager(op, operands, attrs)
    except AxleError as e:  # the IR's shape rules do not know the user's line
        raise e.locate(user_location()) from None
    except (MemoryError, OSError) as e:
        if not is_out_of_memory(e):
            raise
        raise out_of_memory_error(e, op.value, [aval_of(x) for x in operands]) from None
