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
