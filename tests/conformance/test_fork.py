"""fork after using every installed backend: the child never hangs.

A parent process uses every backend (jit, eager, the cpu worker pool), then forks with
``os.fork`` and with multiprocessing's 'fork' start method. In the child, cpu, template
and interpreter re-initialize what did not survive (the cpu worker threads, locks) and
compute right answers, with functions compiled in the parent and fresh ones. OpenCL
drivers do not survive fork (docs/reliability.md): there the child gets a clear
BackendError naming the cause, for new work and for arrays made in the parent. A parent
that never touched OpenCL forks a child that uses it normally. Every child runs under an
alarm, so a hang fails the test instead of stalling it.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import axle

BACKENDS = sorted(axle.REGISTRY.backends())

SCRIPT = textwrap.dedent("""
    import multiprocessing, os, signal, sys
    import numpy as np
    import axle
    import axle.numpy as anp
    from axle.errors import BackendError

    backends, used_in_parent = sys.argv[1].split(","), sys.argv[2].split(",")
    X = (np.arange(3 << 20, dtype=np.float32) % 97) / 97.0  # big enough to split across threads

    def f(x):
        return anp.sum(anp.exp(x) * 2.0), x[:5] * 3.0

    def expected(x, scale):
        return np.sum(np.exp(x) * scale, dtype=np.float64), x[:5] * 3.0

    def check(fn, x, scale, dev):
        s, head = fn(x)
        want_s, want_head = expected(x, scale)
        np.testing.assert_allclose(float(np.asarray(s)), want_s, rtol=1e-3)
        np.testing.assert_allclose(np.asarray(head), want_head, rtol=1e-6)

    parent_fns, parent_arrays = {}, {}
    for b in used_in_parent:
        dev = axle.device(f"{b}:0")
        parent_fns[b] = axle.jit(f, device=dev)
        for _ in range(6):  # past the cpu backend's split trials: the worker pool is in use
            check(parent_fns[b], X, 2.0, dev)
        parent_arrays[b] = axle.device_put(X[:8], dev)
        np.testing.assert_allclose(np.asarray(anp.exp(parent_arrays[b])), np.exp(X[:8]), rtol=1e-5)

    def child():
        signal.alarm(120)  # a hang ends the child with SIGALRM
        os.environ["AXLE_BACKENDS"] = ",".join(backends)  # the parent may have selected fewer
        for b in backends:
            dev = axle.device(f"{b}:0")
            fresh = axle.jit(lambda x: (anp.sum(anp.exp(x) * 5.0), x[:5] * 3.0), device=dev)
            if b == "opencl" and "opencl" in used_in_parent:
                for what, call in [("a fresh function", lambda: fresh(X)),
                                   ("a function compiled in the parent", lambda: parent_fns[b](X)),
                                   ("an array made in the parent", lambda: np.asarray(parent_arrays[b])),
                                   ("an eager op", lambda: anp.exp(parent_arrays[b]))]:
                    try:
                        call()
                    except BackendError as e:
                        assert "forked from process" in str(e) and "spawn" in str(e), str(e)
                    else:
                        raise AssertionError(f"opencl after fork: {what} did not raise")
                continue
            check(fresh, X, 5.0, dev)
            if b in parent_fns:
                check(parent_fns[b], X, 2.0, dev)
                np.testing.assert_allclose(np.asarray(anp.exp(parent_arrays[b])), np.exp(X[:8]), rtol=1e-5)
            if b == "cpu":
                from axle_cpu import threads
                assert threads.pool().alive() == threads.pool().n - 1, "cpu workers not re-created"

    def run_child():
        try:
            child()
        except BaseException:
            import traceback
            traceback.print_exc()
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(1)
        sys.stdout.flush(); sys.stderr.flush()
        os._exit(0)

    pid = os.fork()
    if pid == 0:
        run_child()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"os.fork child: status {status}"

    proc = multiprocessing.get_context("fork").Process(target=run_child)
    proc.start()
    proc.join(180)
    assert proc.exitcode == 0, f"multiprocessing fork child: exit code {proc.exitcode}"
    print("ok")
""")


def _run(backends: list[str], used_in_parent: list[str]) -> None:
    env = {**os.environ, "AXLE_BACKENDS": ",".join(used_in_parent)}  # the parent loads only these
    proc = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(backends), ",".join(used_in_parent)],
                          capture_output=True, text=True, timeout=400, env=env)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_fork_after_using_every_backend() -> None:
    _run(BACKENDS, BACKENDS)


def test_child_uses_opencl_when_the_parent_never_did() -> None:
    """The parent loads only the other backends; the child loads OpenCL itself."""
    if "opencl" not in BACKENDS:
        from axle.testing import require_backend

        require_backend("opencl")  # fails in CI, says why elsewhere
    _run(BACKENDS, [b for b in BACKENDS if b != "opencl"])
