"""benchmarks/train_step_kernels.py's grouping of a compiled training step's kernels (a
small residual network: no timing)."""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from types import ModuleType

import numpy as np
import pytest

import axle
from axle.tree_util import tree_leaves


def test_each_convolution_of_a_training_step_is_forward_input_or_weight_gradient(
        load_bench: Callable[[str], ModuleType], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AXLE_CPU_THREADS", "1")  # what the script would set for the process
    tool = load_bench("train_step_kernels.py")
    R = tool.bench_models._example()
    cfg = R.ResNetConfig(blocks=(1, 1), widths=(4, 8), stem="cifar", num_classes=5)
    params, state = R.init(cfg, seed=0)
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8)).astype(np.float32)
    dev = axle.device("cpu:0")
    call = (*axle.device_put((params, state, R.init_velocity(params)), dev), x, np.arange(2, dtype=np.int32))
    module = R.make_train_step(cfg, device=dev).lower(*call).compile().module
    weights = [p for p in tree_leaves(params) if p.ndim == 4]
    groups = tool._groups(module, len(weights), {p.shape for p in tree_leaves(params)})
    names = axle.profiler.kernel_names(module)
    convs = Counter(groups[names[n.uid]] for n in module.entry.nodes if any(
        m.op is axle.ir.Op.CONVOLUTION for m in tool._ops(n)))
    # one forward convolution and one weight gradient per kernel; an input gradient for
    # each but the stem's (the image's is not asked for), the strided ones in phases
    assert convs["conv forward"] == convs["conv weight gradient"] == len(weights) == 6
    assert convs["conv input gradient"] >= len(weights) - 1 and set(convs) == {
        "conv forward", "conv weight gradient", "conv input gradient"}
    assert "optimizer update, parameter-shaped" in groups.values()
