"""examples/char_rnn.py: min-char-rnn trained with scan + grad + jit follows the NumPy
original's loss curve with one compile; the autodiff gradient equals the hand-written one."""
from __future__ import annotations

import numpy as np
from example_loader import load_example

import axle
import axle.numpy as anp
from axle.frontend import lazy

cr = load_example("char_rnn")


def test_jit_training_follows_numpy_with_one_compile_on_cpu() -> None:
    corpus = cr.Corpus.of()
    want, want_params = cr.train_numpy(corpus, 100)
    axle.reset_stats()
    got, params = cr.train_jit(corpus, 100, device="cpu:0")
    stats = axle.stats()
    assert stats["compiles"] == 1 and stats["per_function"]["step"]["compiles"] == 1
    assert stats["per_function"]["step"]["executions"] == 100
    np.testing.assert_allclose(got, want, rtol=2e-5)
    assert want[-1] < 0.8 * want[0]  # it learns: the curve compared is not a flat line
    for k in cr.NAMES:
        np.testing.assert_allclose(np.asarray(params[k]), want_params[k], rtol=1e-3, atol=1e-5)


def test_scan_gradient_equals_the_hand_written_backprop_in_float64() -> None:
    corpus = cr.Corpus.of()
    params = {k: v.astype(np.float64) + 0.3 * np.random.default_rng(1).standard_normal(v.shape)
              for k, v in cr.init_params(corpus.vocab, 16).items()}
    inputs, targets = corpus.ix[3:14], corpus.ix[4:15]
    hprev = np.random.default_rng(2).standard_normal((16, 1))
    onehot = np.eye(corpus.vocab)[:, :, None]
    want_loss, want_grads, want_h = cr.loss_fun(np, params, inputs, targets, hprev, onehot)
    (loss, h), grads = axle.jit(axle.value_and_grad(cr.rnn_loss, has_aux=True), device="interpreter:0")(
        params, hprev, inputs, targets)
    np.testing.assert_allclose(float(loss), want_loss, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(h), want_h, rtol=1e-12, atol=1e-15)
    for k in cr.NAMES:  # the hand-written gradients are clipped: the raw ones are within [-5, 5] here
        assert np.abs(want_grads[k]).max() < 5
        np.testing.assert_allclose(np.asarray(grads[k]), want_grads[k], rtol=1e-10, atol=1e-12)


def _auto_clustered(corpus, steps: int, cfg, device: str) -> tuple[list[float], dict, dict]:
    """The original Python-loop program on axle.numpy in jit_level="auto", from empty
    caches: (losses, final parameters, the counters)."""
    lazy._exe_cache.clear()
    axle.reset_stats()
    previous = axle.config.jit_level
    axle.config.update(jit_level="auto")
    try:
        losses, params = cr.train_loop(anp, corpus, steps, cfg, to_array=lambda a: axle.device_put(a, device))
        got = [float(v) for v in losses]
        return got, {k: np.asarray(v) for k, v in params.items()}, axle.stats()
    finally:
        axle.config.update(jit_level=previous)


def test_auto_mode_python_loop_compiles_a_bounded_number_of_clusters() -> None:
    """Issue 16 item 6: the unrolled time steps and iterations record the same cluster
    structures again and again, so 3 and 10 iterations compile the same few clusters: the
    first time step (its loss starts from a literal 0.0), the other steps, the last step
    with the backward pass and the update, and the final read-back (4 on cpu:0; before,
    each character read as ``ps[t][targets[t], 0]`` put its index into the cluster's key:
    25 compiles for 3 iterations, 38 for 10)."""
    corpus, cfg = cr.Corpus.of(), cr.Config(hidden=100, seq=25)
    counts = {}
    for steps in (3, 10):
        got, params, stats = _auto_clustered(corpus, steps, cfg, "cpu:0")
        want, want_params = cr.train_numpy(corpus, steps, cfg)
        np.testing.assert_allclose(got, want, rtol=1e-5)
        for k in cr.NAMES:
            np.testing.assert_allclose(params[k], want_params[k], rtol=1e-4, atol=1e-6)
        assert stats["clusters"] >= steps * cfg.seq  # it did run clustered, not eagerly
        assert stats["eager_ops"] == 0
        counts[steps] = stats["compiles"]
    assert counts[3] == counts[10] <= 4, counts
