"""User errors raise axle errors naming the op, the shapes/dtypes and the user's source
line, in every execution mode."""
from __future__ import annotations

import numpy as np
import pytest
from modes_util import MODES, run_mode

import axle
import axle.numpy as anp
from axle.errors import AxleError, DTypeError, ShapeError, TracingError

HERE = "test_numpy_errors.py"


def shape_mismatch(a, b):
    return a + b


def matmul_mismatch(a, b):
    return a @ b.T


def bad_axis(a, b):
    return anp.sum(a, axis=3)


def bad_reshape(a, b):
    return anp.reshape(a, (5, 5))


def refused_dtype(a, b):
    return anp.bitwise_and(a, b)


def empty_max(a, b):
    return anp.max(a[:0])


def bad_concat(a, b):
    return anp.concatenate([a, anp.reshape(b, (2, 2))])


CASES = [
    (shape_mismatch, ShapeError, [r"add", r"f32\[3\]", r"f32\[4\]"]),
    (matmul_mismatch, ShapeError, [r"matmul", r"f32\[3\]", r"f32\[4\]"]),
    (bad_axis, ShapeError, [r"sum", r"axis 3", r"f32\[3\]"]),
    (bad_reshape, ShapeError, [r"reshape", r"\(5, 5\)", r"f32\[3\]"]),
    (refused_dtype, DTypeError, [r"bitwise_and", r"f32\[3\]"]),
    (empty_max, ShapeError, [r"max", r"zero-size"]),
    (bad_concat, ShapeError, [r"concatenate", r"f32\[3\]", r"f32\[2,2\]"]),
]


@pytest.mark.parametrize("fn,err,patterns", CASES, ids=[c[0].__name__ for c in CASES])
@pytest.mark.parametrize("mode", MODES)
def test_errors_name_op_types_and_line(fn, err, patterns, mode):
    a = np.ones(3, np.float32)
    b = np.ones(4, np.float32)
    with pytest.raises(err) as e:
        run_mode(mode, fn, a, b)
    msg = str(e.value)
    assert isinstance(e.value, AxleError)
    for p in patterns:
        assert __import__("re").search(p, msg), f"{p!r} not in {msg!r}"
    assert HERE in msg and fn.__name__ in msg, msg  # the user's file, line and function


def branchy(x):
    if anp.sum(x) > 0:  # Python control flow on a traced value
        return x
    return -x


def test_python_if_on_traced_value():
    with pytest.raises(TracingError) as e:
        axle.jit(branchy, device="interpreter:0")(np.ones(3))
    msg = str(e.value)
    assert "control flow" in msg and "pred[]" in msg and "compare" in msg and f"{HERE}" in msg and "branchy" in msg


@pytest.mark.parametrize("mode", ["eager", "jit_scope", "auto"])
def test_python_if_outside_jit_is_fine(mode):
    np.testing.assert_allclose(run_mode(mode, branchy, np.ones(3)), np.ones(3))


def test_unsupported_dtype_and_bad_index():
    with axle.device("interpreter:0"):
        with pytest.raises(DTypeError, match="complex128"):
            anp.asarray(np.ones(2, np.complex128))
        x = axle.device_put(np.ones((2, 3)))
        with pytest.raises(ShapeError, match=r"getitem.*out of bounds.*f64\[2,3\]") as e:
            x[5]
        assert HERE in str(e.value)
        with pytest.raises(ShapeError, match=r"getitem.*bad index"):
            x[np.array([0, 7])]
        with pytest.raises(ShapeError, match="take"):
            anp.take(x, np.array([3]), axis=0)
