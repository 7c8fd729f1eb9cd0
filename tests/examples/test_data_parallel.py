"""examples/data_parallel.py: data-parallel training over 4 local cpu devices gives one
device's losses (to float rounding), and the shard_map tensor-parallel layer is exact."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from example_loader import EXAMPLES, load_example


def test_four_replicas_train_like_one_device() -> None:
    ex = load_example("data_parallel")
    four, _ = ex.train(4, steps=6)
    one, _ = ex.train(1, steps=6)
    np.testing.assert_allclose(four, one, rtol=1e-5, atol=1e-6)
    assert four[-1] < four[0]  # it trains


def test_tensor_parallel_layer_matches_one_device() -> None:
    ex = load_example("data_parallel")
    rng = np.random.default_rng(3)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((5, 8), (8, 6), (6,)))
    np.testing.assert_allclose(ex.tensor_parallel_layer(x, w, b, 4), np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)


def test_over_four_cpu_devices_from_the_command_line() -> None:
    """--cpu_device_count=4: the replicas run on cpu:0..3, and --check compares with one device."""
    env = dict(os.environ, AXLE_FLAGS="--cpu_device_count=4")
    out = subprocess.run([sys.executable, str(EXAMPLES / "data_parallel.py"), "--steps", "4", "--check"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 replicas on cpu:0, cpu:1, cpu:2, cpu:3" in out.stdout


MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}  # CI containers run as root


def _mpirun(args: list[str], flags: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, AXLE_FLAGS=flags, **MPI_ENV)
    return subprocess.run(["mpirun", "-n", "2", "--oversubscribe", sys.executable, *args],
                          capture_output=True, text=True, env=env, timeout=300)


def test_two_mpi_processes_of_two_devices_train_like_one_device() -> None:
    """mpirun -n 2 on localhost, 2 cpu devices each: 4 replicas whose pmean crosses processes."""
    out = _mpirun([str(EXAMPLES / "data_parallel.py"), "--mpi", "--devices", "2", "--steps", "4", "--check"],
                  "--cpu_device_count=2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "process 0 of 2: 2 replicas on cpu:0, cpu:1" in out.stdout
    assert "process 1 of 2: 2 replicas on cpu:0, cpu:1" in out.stdout


ACROSS = """
import sys
import numpy as np, axle
from axle.errors import CollectiveError
def say(line):  # one write per line: the two processes share mpirun's output
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()
lax = axle.lax
w = axle.distributed.initialize()
p = w.process_index
x = np.arange(8, dtype=np.float32).reshape(2, 4) + 10 * p        # replicas 2p, 2p+1
whole = np.concatenate([np.arange(8, dtype=np.float32).reshape(2, 4) + 10 * q for q in range(2)])
outs = axle.pmap(lambda v: (lax.psum(v, "i"), lax.psum(v.sum(), "i"), lax.pmin(v.astype(np.int32), "i"), lax.all_gather(v, "i"),
                            lax.psum(v.astype(np.float16), "i"), lax.pmax(v.astype(axle.numpy.bfloat16), "i"),
                            lax.all_to_all(v, "i", 0, 0), lax.ppermute(v, "i", [(0, 3), (3, 1)]),
                            lax.psum_scatter(v, "i"), lax.psum_scatter(v.reshape(4, 1), "i", tiled=True),
                            lax.ppermute(v, "i", [(0, 1), (2, 3)])), axis_name="i")(x)
got = [np.asarray(o) for o in outs]
h = whole.astype(np.float16)
wants = [whole.sum(0), whole.sum(), whole.astype(np.int32).min(0), whole, ((h[0] + h[1]) + h[2]) + h[3],
         whole.astype(axle.numpy.bfloat16).max(0).astype(np.float32)]
for g, want in zip(got[:6], wants):
    assert np.array_equal(g[0].astype(want.dtype), want) and np.array_equal(g[1].astype(want.dtype), want), (g, want)
assert np.array_equal(got[6], whole.T[2 * p:2 * p + 2]), got[6]
assert np.array_equal(got[7], [np.zeros(4), whole[0]] if p == 1 else [np.zeros(4), whole[3]]), got[7]
assert np.array_equal(got[8], whole.sum(0)[2 * p:2 * p + 2]), got[8]
assert np.array_equal(got[9][:, 0, 0], whole.sum(0)[2 * p:2 * p + 2]), got[9]
assert np.array_equal(got[10], [np.zeros(4), whole[2 * p]]), got[10]
say("collectives agree")
for label, f, arg in (("shapes", lambda v: lax.psum(v, "i"), np.ones((2, 3 + p), np.float32)),
                      ("program", lambda v: lax.psum(v, "i") if p == 0 else lax.pmax(v, "i"), np.ones((2, 3), np.float32)),
                      ("nothing", lambda v: lax.psum(v * (1 + p), "i"), np.ones((2, 3), np.float32))):
    try:
        axle.pmap(f, axis_name="i")(arg)
    except CollectiveError as e:
        say(f"refused {label}: {e}")
"""


def test_collectives_across_two_processes_and_disagreements() -> None:
    """Every collective over MPI buffers (float16/bfloat16 as bit patterns), and processes
    that disagree on a program's shapes or on the program get a clear error on both."""
    out = _mpirun(["-c", ACROSS], "")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("collectives agree") == 2, out.stdout + out.stderr
    assert out.stdout.count("refused shapes: the processes disagree on a pmap's program (process 0: 2 replicas of "
                            "axis 'i' on (float32[3]); process 1: 2 replicas of axis 'i' on (float32[4]))") == 2, \
        out.stdout
    assert out.stdout.count("refused program: the processes disagree on a pmap's program (process 0: 2 replicas of "
                            "axis 'i' on (float32[3]); process 1: 2 replicas of axis 'i' on (float32[3]): the same "
                            "shapes, but the programs differ in their collectives)") == 2, out.stdout
    assert "refused nothing" not in out.stdout  # a per-process constant is not a disagreement
