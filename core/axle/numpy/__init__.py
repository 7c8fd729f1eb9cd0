"""axle.numpy: NumPy's API on axle arrays, traced inside jit and eager outside.

Broadcasting and dtype promotion follow NumPy 2 exactly (NEP 50: Python scalars are
weak, so ``x_f32 * 2.0`` stays float32). Every function decomposes into primitives.

The modules build on one another without a cycle: _core (conversion, promotion,
elementwise math, reductions), _index (indexing), _shape, _math, _linalg, _quant; importing the
package attaches the array operators and methods (_array_methods)."""
from __future__ import annotations

import importlib as _importlib
import types as _types

from . import _array_methods  # noqa: F401 - attaches the operators and methods of axle arrays
from ._core import *  # noqa: F403 - the package is its modules' public names
from ._elementwise import *  # noqa: F403 - the package is its modules' public names
from ._index import *  # noqa: F403 - the package is its modules' public names
from ._linalg import *  # noqa: F403 - the package is its modules' public names
from ._math import *  # noqa: F403 - the package is its modules' public names
from ._quant import *  # noqa: F403 - the package is its modules' public names
from ._shape import *  # noqa: F403 - the package is its modules' public names
from ._sort import *  # noqa: F403 - the package is its modules' public names

# isort: split
# the array API standard's names that NumPy lacks (docs/array-api.md)
from ._api_math import *  # noqa: F403 - the package is its modules' public names
from ._api_shape import *  # noqa: F403 - the package is its modules' public names
from ._array_api import *  # noqa: F403 - the package is its modules' public names
from ._array_api import __array_api_version__, __array_namespace_info__

# isort: split
from . import linalg as linalg  # the array API's linalg extension: axle.numpy.linalg

__all__ = [n for n in dir() if not n.startswith("_")] + ["__array_api_version__", "__array_namespace_info__"]


def __getattr__(name: str) -> _types.ModuleType:
    # np.random-style conveniences, loaded on first use: axle.numpy.random builds on
    # axle.random, which itself builds on axle.numpy
    if name == "random":
        return _importlib.import_module(".random", __name__)
    raise AttributeError(f"module 'axle.numpy' has no attribute {name!r}")
