"""Kernel objects are made without pyopencl's call invoker (axle_opencl/kernel_object.py):
compiling generates none (axle launches with set_arg and enqueue_nd_range_kernel), a
kernel object called through pyopencl's own API generates its invoker then, once, and
computes what the plain one does; pyopencl's generator is back in place afterwards, and a
pyopencl whose constructor refuses the stand-in gets the plain constructor."""
from __future__ import annotations

import numpy as np
import pyopencl as cl
import pyopencl.invoker as invoker
import pytest

import axle
import axle.numpy as anp
from axle_opencl import kernel_object
from axle_opencl.runtime import build_program

SOURCE = "__kernel void axpy(__global float *out, __global const float *x, float a) {\n" \
         "  int i = get_global_id(0); out[i] = a * x[i] + 1.0f; }\n"


@pytest.fixture
def generated(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kernel names pyopencl's invoker generator is called for, from now on."""
    names: list[str] = []
    real = invoker.generate_enqueue_and_set_args

    def counting(function_name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        names.append(function_name)
        return real(function_name, *args, **kwargs)

    monkeypatch.setattr(invoker, "generate_enqueue_and_set_args", counting)
    monkeypatch.setattr(kernel_object, "_deferring", True)
    return names


def _context() -> tuple[cl.Context, cl.CommandQueue, cl.Program]:
    ctx = cl.Context([axle.REGISTRY.backend_for(axle.device("opencl:0")).runtime(axle.device("opencl:0")).cl_device])
    return ctx, cl.CommandQueue(ctx), build_program(ctx, ctx.devices[0], SOURCE)


def test_a_compile_generates_no_invoker(ocl, generated: list[str]) -> None:  # noqa: ANN001
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    # a program of its own (a name no other test compiles), so its kernels are new objects
    f = axle.jit(lambda v: anp.exp(v * 0.25) - anp.sum(v * 0.125, axis=1, keepdims=True), device=ocl)
    got = np.asarray(f(x))
    np.testing.assert_allclose(got, np.exp(x * 0.25) - np.sum(x * 0.125, axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    assert axle.stats()["per_device"]["opencl:0"]["compiles"] >= 1
    assert generated == []
    assert invoker.generate_enqueue_and_set_args.__name__ == "counting"  # put back


def test_pyopencls_own_call_api_still_works(ocl, generated: list[str]) -> None:  # noqa: ANN001
    ctx, queue, prg = _context()
    k = kernel_object.new_kernel(prg, "axpy")
    assert generated == []
    x = np.arange(8, dtype=np.float32)
    xb = cl.Buffer(ctx, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=x)
    ob = cl.Buffer(ctx, cl.mem_flags.WRITE_ONLY, x.nbytes)
    out = np.empty_like(x)
    for a in (2.0, 3.0):
        k(queue, x.shape, None, ob, xb, np.float32(a))  # the invoker, generated at the first call
        cl.enqueue_copy(queue, out, ob)
        np.testing.assert_array_equal(out, a * x + 1)
    k.set_args(ob, xb, np.float32(5.0))
    cl.enqueue_nd_range_kernel(queue, k, x.shape, None)
    cl.enqueue_copy(queue, out, ob)
    np.testing.assert_array_equal(out, 5 * x + 1)
    assert generated == ["axpy"]  # once for the kernel object, not per call


def test_a_bad_kernel_name_raises_pyopencls_error(ocl, generated: list[str]) -> None:  # noqa: ANN001
    _, _, prg = _context()
    with pytest.raises(cl.Error):
        kernel_object.new_kernel(prg, "no_such_kernel")
    assert kernel_object._deferring  # the stand-in was not what failed


def test_a_constructor_refusing_the_stand_in_gets_the_plain_one(ocl, generated: list[str],  # noqa: ANN001
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, prg = _context()
    real_kernel = cl.Kernel
    counting = invoker.generate_enqueue_and_set_args

    def strict(program: cl.Program, name: str) -> cl.Kernel:
        if invoker.generate_enqueue_and_set_args is not counting:
            raise TypeError("this pyopencl wants its own generator")
        return real_kernel(program, name)

    monkeypatch.setattr(kernel_object.cl, "Kernel", strict)
    assert kernel_object.new_kernel(prg, "axpy").function_name == "axpy"
    assert not kernel_object._deferring
    assert generated == ["axpy"]


def test_kernel_objects_made_at_once_leave_pyopencls_generator_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two threads making kernel objects at once: the second reads pyopencl's generator
    while the first has its stand-in in place, then waits for the lock. What each puts back
    afterwards is pyopencl's own generator (read under the lock), never the other's stand-in,
    which would leave every later kernel object of the process, the program's own included,
    with a deferred invoker."""
    import threading

    real = invoker.generate_enqueue_and_set_args
    monkeypatch.setattr(kernel_object, "_deferring", True)
    waiting = threading.Event()
    first = threading.current_thread()

    class Lock:
        """kernel_object's lock, saying when a thread other than the first waits for it."""

        def __init__(self) -> None:
            self.lock = threading.Lock()

        def __enter__(self) -> None:
            if threading.current_thread() is not first:
                waiting.set()
            self.lock.acquire()

        def __exit__(self, *exc: object) -> None:
            self.lock.release()

    monkeypatch.setattr(kernel_object, "_lock", Lock())
    seen: dict[str, object] = {}
    other: list[threading.Thread] = []

    def kernel(program: object, name: str) -> str:
        seen[name] = invoker.generate_enqueue_and_set_args
        if name == "a":  # the second thread starts while this constructor runs
            t = threading.Thread(target=kernel_object.new_kernel, args=(program, "b"))
            t.start()
            assert waiting.wait(30)
            other.append(t)
        return name

    monkeypatch.setattr(kernel_object.cl, "Kernel", kernel)
    assert kernel_object.new_kernel(None, "a") == "a"  # type: ignore[arg-type]
    other[0].join(30)
    assert seen["a"] is not real and seen["b"] is not real  # each constructor saw a stand-in
    assert invoker.generate_enqueue_and_set_args is real
