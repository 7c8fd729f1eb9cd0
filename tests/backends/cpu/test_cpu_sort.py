"""The cpu sort's fast paths (axle_cpu.sort) are bit-identical to the op table's reference:
which zero and which NaN (sign, payload) lands where, stability of the permutation,
descending order, every dtype, long rows and many short rows."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import axle.numpy as anp
from axle.errors import BackendError
from axle.ir.dtypes import is_float_numpy
from axle.ir.ops import OPS, Op
from axle_cpu.aot import compile_aot
from axle_cpu.sort import host_sort

RNG = np.random.default_rng(5)
DTYPES = (np.bool_, np.int32, np.int64, np.float16, np.float32, np.float64,
          # the narrow and unsigned integers and bfloat16 (issue 15): u32 keys take the packed
          # path as unsigned, bfloat16 ones sort as float32 (ml_dtypes misplaces NaN)
          np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64, ml_dtypes.bfloat16)


def _tricky(shape: tuple[int, ...], dt: type) -> np.ndarray:
    if dt is np.bool_:
        return RNG.random(shape) < 0.5
    x = RNG.integers(-3, 4, size=shape).astype(dt)
    flat = x.reshape(-1)
    if is_float_numpy(np.dtype(dt)):
        specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0], dt)
        # a NaN with another payload: the stable order of NaNs is visible in their bits
        odd_nan = np.array([0x7FC12345 if dt is np.float32 else 0], np.uint32).view(np.float32)
        at = RNG.integers(0, flat.size, size=max(1, flat.size // 3))
        flat[at] = RNG.choice(specials, size=at.size)
        if dt is np.float32:
            flat[RNG.integers(0, flat.size, size=2)] = odd_nan[0]
    else:
        info = np.iinfo(dt)
        flat[RNG.integers(0, flat.size, size=3)] = [info.min, info.max, 0]
    return x


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(f"u{a.dtype.itemsize}") if is_float_numpy(a.dtype) else a


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("shape,dim", [((1000,), 0), ((37, 9), 1), ((9, 37), 0), ((4, 3, 17), 1), ((5, 1), 1)])
@pytest.mark.parametrize("descending", [0, 1])
@pytest.mark.parametrize("index", [0, 1, 2])
def test_host_sort_is_bit_identical_to_the_reference(dt: type, shape: tuple[int, ...], dim: int, descending: int,
                                                     index: int) -> None:
    key = _tricky(shape, dt)
    pos = np.broadcast_to(np.arange(shape[dim]).reshape([-1 if i == dim else 1 for i in range(len(shape))]),
                          shape).astype(np.int32)
    carried = _tricky(shape, np.float32)
    xs = [key, pos, carried]
    attrs = dict(dimension=dim, num_keys=1, descending=descending, index=index)
    want = OPS[Op.SORT].reference(*xs, **attrs)
    got = host_sort(xs, **attrs)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_host_sort_two_keys_and_empty() -> None:
    k1, k2 = _tricky((6, 50), np.float64), _tricky((6, 50), np.int32)
    pos = np.broadcast_to(np.arange(50), (6, 50)).astype(np.int64)
    for d in (0, 1):
        attrs = dict(dimension=1, num_keys=2, descending=d, index=2)
        np.testing.assert_array_equal(host_sort([k1, k2, pos], **attrs), OPS[Op.SORT].reference(k1, k2, pos, **attrs))
    empty = np.zeros((3, 0), np.float32)
    assert host_sort([empty], dimension=1, num_keys=1, descending=0, index=0).shape == (3, 0)


def test_aot_refuses_a_sort_naming_it(tmp_path, cpu) -> None:  # noqa: ANN001
    """A sort is a host library call on cpu: AOT cannot compile it and says so."""
    with pytest.raises(BackendError, match="sort"):
        compile_aot(lambda x: anp.sort(x), ["f32[8]"], str(tmp_path))
