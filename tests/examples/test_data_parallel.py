"""examples/data_parallel.py: data-parallel training over 4 local cpu devices gives one
device's losses (to float rounding), and the shard_map tensor-parallel layer is exact."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from conftest import EXAMPLES, load_example


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


DISAGREE = """
import numpy as np, axle
from axle.errors import CollectiveError
w = axle.distributed.initialize()
x = np.ones((2, 3 + w.process_index), np.float32)   # process 1 has other shapes
try:
    axle.pmap(lambda v: axle.lax.psum(v, "i"), axis_name="i")(x)
except CollectiveError as e:
    print("refused:", e)
"""


def test_processes_that_disagree_on_shapes_get_a_clear_error() -> None:
    out = _mpirun(["-c", DISAGREE], "")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("refused: the processes disagree on a collective's operand (process 0: float32[3], "
                            "process 1: float32[4])") == 2, out.stdout
