"""Thread safety: 8 threads on every installed backend at once, first use included.

Each case runs in a fresh interpreter, so the backend's lazy state (OpenCL context and
queue, program caches, LLVM's JIT, the registry itself) is created while 8 threads race
for it. Every thread jits fresh functions over mixed shapes, runs eager ops and a lazy
cluster, and checks each result against NumPy. The ``loaded`` variant adds busy threads
and a tiny GIL switch interval, so threads are preempted inside every critical section.
A hang shows as the subprocess timeout, never as a stuck test run.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import axle

BACKENDS = sorted(axle.REGISTRY.backends())

SCRIPT = textwrap.dedent("""
    import sys, threading
    import numpy as np
    import numpy.testing  # NumPy's lazy submodule import is not thread-safe (RecursionError)
    backend, loaded = sys.argv[1], sys.argv[2] == "1"
    if loaded:
        sys.setswitchinterval(1e-6)  # preempt threads inside every critical section
    import axle
    import axle.numpy as anp

    THREADS, ROUNDS = 8, 3
    SHAPES = [(3,), (5, 4), (17, 33), (1, 64), (2, 3, 8)]
    start = threading.Barrier(THREADS)
    errors, done = [], []
    stop = threading.Event()

    def busy():
        x = 0
        while not stop.is_set():
            x += 1

    def work(t):
        dev = axle.device(f"{backend}:0")  # first registry use also races
        rng = np.random.default_rng(t)
        start.wait()
        for r in range(ROUNDS):
            for i, shape in enumerate(SHAPES):
                c = float(t * 10 + r + i)  # a constant per thread: distinct programs race too
                def f(x, y, c=c):
                    return anp.sum(anp.tanh(x) * y + c, axis=-1), x * 2.0 - y
                x = rng.standard_normal(shape).astype(np.float32)
                y = rng.standard_normal(shape).astype(np.float32)
                got_sum, got_lin = axle.jit(f, device=dev)(x, y)  # a fresh function: a new compile
                np.testing.assert_allclose(np.asarray(got_sum), np.sum(np.tanh(x) * y + c, axis=-1),
                                           rtol=1e-4, atol=1e-4)
                np.testing.assert_allclose(np.asarray(got_lin), x * 2.0 - y, rtol=1e-6, atol=1e-6)
                xd = axle.device_put(x, dev)
                np.testing.assert_allclose(np.asarray(anp.maximum(xd, 0.5) + c), np.maximum(x, 0.5) + c,
                                           rtol=1e-6)
                with axle.jit_scope():
                    z = anp.exp(xd) * 3.0
                np.testing.assert_allclose(np.asarray(z), np.exp(x) * 3.0, rtol=1e-5)
        done.append(t)

    def guarded(t):
        try:
            work(t)
        except BaseException as e:
            import traceback
            errors.append(f"thread {t}: " + traceback.format_exc())

    busy_threads = [threading.Thread(target=busy, daemon=True) for _ in range(2 if loaded else 0)]
    for b in busy_threads:
        b.start()
    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    stop.set()
    if errors:
        print("\\n".join(errors))
        sys.exit(1)
    print(f"ok {len(done)} threads")
""")


@pytest.mark.parametrize("loaded", [False, True], ids=["quiet", "loaded"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_threads_first_use(backend: str, loaded: bool) -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, backend, "1" if loaded else "0"],
                          capture_output=True, text=True, timeout=240,
                          env={**__import__("os").environ, "AXLE_BACKENDS": backend})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "ok 8 threads" in proc.stdout
