"""axle.numpy: NumPy's API on axle arrays, traced inside jit and eager outside.

Broadcasting and dtype promotion follow NumPy 2 exactly (NEP 50: Python scalars are
weak, so ``x_f32 * 2.0`` stays float32). Every function decomposes into primitives.

The modules build on one another without a cycle: _core (conversion, promotion,
elementwise math, reductions), _index (indexing), _shape, _math, _linalg; importing the
package attaches the array operators and methods (_array_methods)."""
from __future__ import annotations

from . import _array_methods  # noqa: F401 - attaches the operators and methods of axle arrays
from ._core import *  # noqa: F403 - the package is its modules' public names
from ._elementwise import *  # noqa: F403 - the package is its modules' public names
from ._index import *  # noqa: F403 - the package is its modules' public names
from ._linalg import *  # noqa: F403 - the package is its modules' public names
from ._math import *  # noqa: F403 - the package is its modules' public names
from ._shape import *  # noqa: F403 - the package is its modules' public names
from ._sort import *  # noqa: F403 - the package is its modules' public names

__all__ = [n for n in dir() if not n.startswith("_")]
