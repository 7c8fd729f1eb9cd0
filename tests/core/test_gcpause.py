"""The collector is held off while a first call traces, compiles and runs (a compile's
allocations would otherwise set off full collections in a new process), and the state the
caller had is back afterwards: enabled stays enabled, disabled stays disabled."""
from __future__ import annotations

import gc
import threading

import numpy as np

import axle
import axle.numpy as anp
from axle.frontend.gcpause import gc_paused


def test_restores_enabled_state_after_nested_blocks() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block still holds it
    assert gc.isenabled()


def test_caller_that_disabled_collection_keeps_it_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_restored_after_an_exception() -> None:
    try:
        with gc_paused():
            raise ValueError("inside")
    except ValueError:
        pass
    assert gc.isenabled()


def test_overlapping_blocks_in_two_threads_reenable_when_both_leave() -> None:
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    inside.wait(10)
    with gc_paused():
        pass
    assert not gc.isenabled()  # the other thread's block is still open
    leave.set()
    t.join()
    assert gc.isenabled()


def test_jit_first_call_traces_with_collector_paused_and_restores_it() -> None:
    seen: list[bool] = []

    def f(x):  # noqa: ANN001, ANN202
        seen.append(gc.isenabled())
        return anp.tanh(x) * 2.0

    x = np.linspace(-2, 2, 16, dtype=np.float32)
    out = np.asarray(axle.jit(f, device="interpreter:0")(x))
    assert seen == [False]
    assert gc.isenabled()
    np.testing.assert_array_equal(out, np.tanh(x) * np.float32(2.0))
