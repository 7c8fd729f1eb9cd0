"""examples/seed_reduce_sum.py: the seed computation in all four modes."""
from __future__ import annotations

import numpy as np

import axle


def test_seed_example_all_modes(seed_example, capsys):
    results = seed_example.main(["--device", "interpreter:0", "--n", "1000", "--repeats", "1"])
    out = capsys.readouterr().out
    assert set(results) == {"eager", "jit", "jit_scope", "auto"}
    values = {round(r[0], 3) for r in results.values()}
    assert len(values) == 1  # the same number in every mode
    assert results["eager"][1] == 3  # one kernel per primitive: multiply, add, reduce
    x = np.ones(1000, np.float32)
    compiled = axle.jit(seed_example.model_fn, device="interpreter:0").lower(x, x, x).compile()
    for mode in ("jit", "jit_scope", "auto"):
        assert results[mode][1] == compiled.report()["kernels"], mode  # the compiled cluster's kernels
    assert results["auto"][1] == results["jit"][1] == results["jit_scope"][1] == 1  # fused into one kernel
    for mode in results:
        assert mode in out
    assert axle.config.jit_level == "off"  # the example restores the mode it changed
