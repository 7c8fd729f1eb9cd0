"""The hot path of eager ops (frontend/eager.py ``launch_cached``): an op with plain
attributes on concrete, non-weak arrays of one device whose signature ran before skips placement,
promotion and the executable lookup. It must give exactly what the full path gives, and
never run where the full path would not run an op eagerly."""
from __future__ import annotations

import numpy as np
import pytest

import axle
import axle.numpy as anp
from axle.frontend import eager
from axle.frontend.lazy import jit_scope
from axle.ir.ops import Op

DEVICES = ["cpu:0", "interpreter:0"]


def _fresh() -> None:
    eager._launchers.clear()


@pytest.mark.parametrize("device", DEVICES)
def test_hot_path_results_equal_the_full_path(device: str) -> None:
    _fresh()
    x = axle.device_put(np.array([1.5, -2.0, np.nan, np.inf], np.float32), device)
    y = axle.device_put(np.array([0.5, 4.0, 1.0, -np.inf], np.float32), device)
    first = [np.asarray(f(x, y)) for f in (anp.add, anp.subtract, anp.multiply, anp.maximum, anp.minimum)]
    assert eager.launch_cached(Op.ADD, (x, y)) is not None  # the full path filled the hot path
    again = [f(x, y) for f in (anp.add, anp.subtract, anp.multiply, anp.maximum, anp.minimum)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, np.asarray(b))
        assert b.committed and not b.weak and b.device.name == device


def test_signatures_differ_by_type_committed_and_weak() -> None:
    _fresh()
    x32 = axle.device_put(np.ones(3, np.float32), "cpu:0")
    x64 = axle.device_put(np.ones(3, np.float64), "cpu:0")
    assert np.asarray(x32 + x32).dtype == np.float32
    out = x64 + x32  # promotion: the full path (a convert, then an add of two f64)
    assert out.dtype == np.float64
    np.testing.assert_array_equal(np.asarray(x64 + x32), [2, 2, 2])
    uncommitted = axle.Array(x32.buffer)
    assert not (uncommitted + uncommitted).committed and (x32 + uncommitted).committed
    weak = axle.Array(x32.buffer, weak=True)
    assert eager._signature(Op.ADD, [weak, weak]) is None
    assert (weak + weak).weak  # all-weak operands keep a weak result (the full path's rule)


def test_true_divide_of_integers_never_takes_an_integer_division() -> None:
    """true_divide has a dtype rule of its own: ints divide as float64, whatever lax.div
    on the same ints (an integer division) left in the hot path."""
    _fresh()
    i = axle.device_put(np.array([7, -7], np.int32), "cpu:0")
    from axle import lax
    np.testing.assert_array_equal(np.asarray(lax.div(i, axle.device_put(np.array([2, 2], np.int32), "cpu:0"))),
                                  [3, -3])
    two = axle.device_put(np.array([2, 2], np.int32), "cpu:0")
    np.testing.assert_allclose(np.asarray(i / two), [3.5, -3.5])
    np.testing.assert_allclose(np.asarray(anp.true_divide(i, two)), [3.5, -3.5])


def test_not_taken_while_tracing_or_recording() -> None:
    _fresh()
    x = axle.device_put(np.arange(3, dtype=np.float32), "cpu:0")
    x + x  # the hot path knows this signature now
    f = axle.jit(lambda: x + x)  # concrete arrays closed over: staged into the trace
    np.testing.assert_array_equal(np.asarray(f()), [0, 2, 4])
    assert f.trace_count == 1 and "add" in f.lower().as_text()
    before = axle.stats()["eager_ops"]
    with jit_scope():
        out = x + x
        assert out.is_pending  # recorded into the lazy cluster, not launched
    assert axle.stats()["eager_ops"] == before
    np.testing.assert_array_equal(np.asarray(out), [0, 2, 4])


def test_hot_path_counts_eager_ops_and_launches() -> None:
    _fresh()
    x = axle.device_put(np.ones(4, np.float32), "cpu:0")
    x * x
    axle.reset_stats()
    for _ in range(5):
        x * x
    s = axle.stats()
    assert s["eager_ops"] == 5 and s["kernel_launches"] == 5
    assert s["per_function"]["eager:multiply"]["kernel_launches"] == 5


def test_flag_changes_take_the_full_path() -> None:
    _fresh()
    x = axle.device_put(np.ones(2, np.float32), "cpu:0")
    x - x
    key = eager._signature(Op.SUB, [x, x])
    try:
        axle.config.update(check_indices=True)
        assert eager._signature(Op.SUB, [x, x]) != key
        np.testing.assert_array_equal(np.asarray(x - x), [0, 0])
    finally:
        axle.config.update(check_indices=False)


def test_committed_arrays_on_two_devices_still_raise() -> None:
    _fresh()
    a = axle.device_put(np.ones(2, np.float32), "cpu:0")
    b = axle.device_put(np.ones(2, np.float32), "interpreter:0")
    a + a
    b + b
    with pytest.raises(axle.errors.DeviceError, match="committed to different devices"):
        a + b


def test_a_subclass_overriding_execute_gets_no_interpreter_launcher() -> None:
    """The interpreter's launcher is its reference, which would skip the execute of a
    subclass (a plugin or a test's asynchronous device built on it): those keep execute."""
    from axle.backends.interpreter import InterpreterExecutable
    from axle.ir.dtypes import DType
    from axle.ir.types import TensorType

    class Late(InterpreterExecutable):
        def execute(self, args):  # noqa: ANN001, ANN202
            return super().execute(args)

    t = TensorType(DType.FLOAT32, (2,))
    module = eager.one_op_module(Op.ADD, (t, t), {})
    (dev,) = axle.devices("interpreter")
    assert InterpreterExecutable(module, dev).launcher() is not None
    assert Late(module, dev).launcher() is None


def test_same_type_operands_skip_promotion_in_every_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two non-weak arrays of one type and device need no promotion, broadcast or move:
    axle.numpy applies the primitive directly, also to pending values (auto mode records
    at half the cost), and mixed operands still take the full preparation."""
    from axle.numpy import _core

    x = axle.device_put(np.arange(3, dtype=np.float32), "cpu:0")
    prepared = []
    full = _core._prepare
    monkeypatch.setattr(_core, "_prepare", lambda *a, **k: (prepared.append(a[0]), full(*a, **k))[1])
    old = axle.config.jit_level
    try:
        axle.config.update(jit_level="auto")
        y = x * x
        z = y + x  # y is pending: recorded without _prepare
        assert y.is_pending and z.is_pending
        np.testing.assert_array_equal(np.asarray(z), [0, 2, 6])
        assert prepared == []
        np.testing.assert_array_equal(np.asarray(x + 1.0), [1, 2, 3])  # a scalar: prepared
        assert prepared == ["add"]
    finally:
        axle.config.update(jit_level=old)


def test_buffer_is_still_a_frozen_dataclass() -> None:
    """Buffer's written-out __init__ (the eager hot path makes one per result) keeps the
    dataclass's behaviour: fields, keyword construction, replace(), frozen assignment."""
    import dataclasses

    from axle.backend import Buffer
    from axle.ir.dtypes import DType
    from axle.ir.types import TensorType

    dev, t = axle.device("interpreter:0"), TensorType(DType.FLOAT32, (2,))
    b = Buffer(device=dev, type=t, handle="h")
    assert [f.name for f in dataclasses.fields(b)] == ["device", "type", "handle"]
    assert (b.device, b.type, b.handle, b.nbytes) == (dev, t, "h", 8)
    assert dataclasses.replace(b, handle="g").handle == "g" and b.handle == "h"
    with pytest.raises(dataclasses.FrozenInstanceError):
        b.handle = "x"  # type: ignore[misc]


@pytest.mark.parametrize("device", DEVICES)
def test_matmul_and_sum_hot_paths_keep_numpy_semantics(device: str) -> None:
    """matmul's and sum's shortcuts into the hot path look only at the buffers' ranks and
    dtypes: a 3-D dot_general signature with matmul's attributes (run by lax) is not a
    batched matmul, and an integer sum accumulates in int64 (not the hot path's int32)."""
    from axle import lax

    _fresh()
    a = axle.device_put(np.arange(27, dtype=np.float32).reshape(3, 3, 3), device)
    outer = lax.dot_general(a, a, (1,), (0,))  # no batch dims: f32[3,3,3,3]
    assert outer.shape == (3, 3, 3, 3)
    np.testing.assert_array_equal(np.asarray(anp.matmul(a, a)), np.matmul(np.asarray(a), np.asarray(a)))
    i = axle.device_put(np.full(4, 2**30, np.int32), device)
    lax.reduce(i, "sum", (0,))  # fills an int32 signature of sum over every axis
    assert anp.sum(i).dtype == np.int64 and int(anp.sum(i)) == 2**32
    x = axle.device_put(np.ones((2, 3), np.float32), device)
    assert float(anp.sum(x)) == 6.0 and float(anp.sum(x)) == 6.0  # the second through the hot path
    assert eager.launch_cached(Op.REDUCE, (x,), (("kind", "sum"), ("axes", (0, 1)))) is not None


def test_hot_ids_name_one_device_and_type_and_are_never_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot path's key holds a small int per (device, type) stamped on each buffer
    (eager._hot_id). Equal types on two devices, or two types on one, never share an id;
    when the table is dropped (here after two entries) new ids are taken, never an old one
    for another type, so buffers stamped before still find only their own entries, and
    every result stays right."""
    _fresh()
    eager._hot_ids.clear()  # (other tests in this process filled it: no new id would drop it)
    monkeypatch.setattr(eager, "_HOT_IDS_MAX", 2)
    arrays = {}
    for dev in ("cpu:0", "interpreter:0"):
        for dt in (np.float32, np.float64, np.int32):
            arrays[dev, dt] = axle.device_put(np.arange(4, dtype=dt) + 1, dev)
    seen: dict[int, tuple] = {}
    for _ in range(3):  # the table is dropped several times on the way
        for (dev, dt), x in arrays.items():
            out = x * x
            np.testing.assert_array_equal(np.asarray(out), (np.arange(4, dtype=dt) + 1) ** 2)
            assert out.dtype == dt and out.device.name == dev and out.committed
            for buf in (x._buffer, out._buffer):
                assert buf.hot_id != 0
                assert seen.setdefault(buf.hot_id, (buf.device, buf.type)) == (buf.device, buf.type)
    assert len(eager._hot_ids) <= 2


@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_copied_arrays_carry_no_hot_id_and_their_own_address(how: str) -> None:
    """A copy of an array (deepcopy, or pickle, as to another process) has its own memory
    and no hot id: ids are this process's (in another, the same id names another device
    and type, and the hot path would launch that type's executable on it), and a cpu
    buffer's remembered address is the copy's (a deepcopy read the original's memory,
    freed with it: 2 + 2 gave 14 once that memory was reused)."""
    import copy
    import gc
    import pickle

    _fresh()
    a = anp.ones(1 << 16, dtype=anp.float32)
    b = a + a
    b = b * 1.0  # through the hot path: stamped
    assert b._buffer.hot_id != 0
    c = copy.deepcopy(b) if how == "deepcopy" else pickle.loads(pickle.dumps(b))
    assert "hot_id" not in c._buffer.__dict__
    if hasattr(c._buffer, "addr"):
        assert c._buffer.addr == c._buffer.handle.ctypes.data
    del a, b
    gc.collect()
    junk = [anp.full(1 << 16, 7.0, dtype=anp.float32) + 1 for _ in range(8)]
    np.testing.assert_array_equal(np.asarray(c + c), np.full(1 << 16, 4.0, np.float32))
    del junk
