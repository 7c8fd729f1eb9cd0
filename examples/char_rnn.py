"""Karpathy's min-char-rnn: a character-level vanilla RNN (hidden 100, truncated backprop
over 25 steps, Adagrad) trained on a small built-in text, three ways:

- ``jit``: the model written with ``axle.lax.scan`` and differentiated with
  ``axle.value_and_grad``; the whole training step (loss, gradient, clipping, Adagrad) is
  one ``axle.jit`` function, compiled once;
- ``eager``: the original program, a Python loop over the time steps with the gradient
  written out by hand (:func:`loss_fun`), run op by op, or clustered automatically with
  ``axle.config.update(jit_level="auto")``;
- ``numpy``: the same original program on NumPy, the reference.

    python examples/char_rnn.py                        # jit on the default device, and NumPy
    python examples/char_rnn.py --device cpu:0 --steps 300
    python examples/char_rnn.py --mode auto --steps 20 # the Python loop, auto-clustered

It prints the loss every few steps beside NumPy's, the compiles and the time per step.
Everything is float32 (Karpathy's original is float64).
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import axle
import axle.numpy as anp
from axle import lax, tree_util

TEXT = (
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having "
    "nothing to do: once or twice she had peeped into the book her sister was reading, but it had "
    "no pictures or conversations in it, 'and what is the use of a book,' thought Alice 'without "
    "pictures or conversations?' So she was considering in her own mind (as well as she could, for "
    "the hot day made her feel very sleepy and stupid), whether the pleasure of making a "
    "daisy-chain would be worth the trouble of getting up and picking the daisies, when suddenly a "
    "White Rabbit with pink eyes ran close by her.\n"
)

NAMES = ("Wxh", "Whh", "Why", "bh", "by")
Params = dict[str, Any]


@dataclass(frozen=True)
class Config:
    hidden: int = 100
    seq: int = 25
    #: the original's 0.1 is chaotic on a text this small: Adagrad's first update moves every
    #: weight by about lr (weights start at 0.01), and NumPy's own float32 and float64 runs
    #: differ by 20% after 10 steps; at 0.01 they agree to 1e-7 and the loss falls further
    lr: float = 0.01


@dataclass(frozen=True)
class Corpus:
    """The text as vocabulary indices."""

    chars: list[str]
    ix: np.ndarray  # int32 [len(text)]

    @classmethod
    def of(cls, text: str = TEXT) -> Corpus:
        chars = sorted(set(text))
        pos = {c: i for i, c in enumerate(chars)}
        return cls(chars, np.array([pos[c] for c in text], np.int32))

    @property
    def vocab(self) -> int:
        return len(self.chars)


def init_params(vocab: int, hidden: int = 100, seed: int = 0) -> Params:
    """Karpathy's initialization: weights N(0, 0.01^2), zero biases; column-vector layout."""
    rng = np.random.default_rng(seed)
    shapes = {"Wxh": (hidden, vocab), "Whh": (hidden, hidden), "Why": (vocab, hidden)}
    params = {k: (rng.standard_normal(s) * 0.01).astype(np.float32) for k, s in shapes.items()}
    params["bh"] = np.zeros((hidden, 1), np.float32)
    params["by"] = np.zeros((vocab, 1), np.float32)
    return params


def batches(corpus: Corpus, cfg: Config, steps: int) -> list[tuple[np.ndarray, np.ndarray, bool]]:
    """(inputs, targets, reset the hidden state) of each step: consecutive windows of
    ``seq`` characters, the next character as target, back to the start (and a zero state)
    when the text runs out, as in the original."""
    out, p = [], 0
    for n in range(steps):
        reset = n == 0 or p + cfg.seq + 1 >= len(corpus.ix)
        if reset:
            p = 0
        out.append((corpus.ix[p:p + cfg.seq], corpus.ix[p + 1:p + cfg.seq + 1], reset))
        p += cfg.seq
    return out


# ------------------------------------------------------------ the original program


def loss_fun(xp: Any, params: Params, inputs: np.ndarray, targets: np.ndarray, hprev: Any,
             onehot: np.ndarray) -> tuple[Any, Params, Any]:
    """Karpathy's ``lossFun`` for the array module ``xp`` (numpy or axle.numpy): forward
    over the steps, backprop through time written out, gradients clipped to [-5, 5].
    ``onehot``: [vocab, vocab, 1] host columns. Returns (loss, gradients, last hidden state)."""
    Wxh, Whh, Why, bh, by = (params[k] for k in NAMES)
    xs, hs, ps = {}, {-1: hprev}, {}
    loss = 0.0
    for t in range(len(inputs)):
        xs[t] = onehot[inputs[t]]
        hs[t] = xp.tanh(xp.dot(Wxh, xs[t]) + xp.dot(Whh, hs[t - 1]) + bh)
        y = xp.dot(Why, hs[t]) + by
        ps[t] = xp.exp(y) / xp.sum(xp.exp(y))
        loss += -xp.log(ps[t][targets[t], 0])
    d = {k: xp.zeros_like(v) for k, v in params.items()}
    dhnext = xp.zeros_like(hs[0])
    for t in reversed(range(len(inputs))):
        dy = ps[t] - onehot[targets[t]]  # the gradient of softmax + cross-entropy
        d["Why"] += xp.dot(dy, hs[t].T)
        d["by"] += dy
        dh = xp.dot(Why.T, dy) + dhnext
        dhraw = (1 - hs[t] * hs[t]) * dh  # through tanh
        d["bh"] += dhraw
        d["Wxh"] += xp.dot(dhraw, xs[t].T)
        d["Whh"] += xp.dot(dhraw, hs[t - 1].T)
        dhnext = xp.dot(Whh.T, dhraw)
    return loss, {k: xp.clip(v, -5, 5) for k, v in d.items()}, hs[len(inputs) - 1]


def adagrad(xp: Any, params: Params, grads: Params, mems: Params, lr: float) -> tuple[Params, Params]:
    """``mem += g*g; param -= lr * g / sqrt(mem + 1e-8)`` for every parameter."""
    mems = {k: mems[k] + grads[k] * grads[k] for k in NAMES}
    return {k: params[k] - lr * grads[k] / xp.sqrt(mems[k] + 1e-8) for k in NAMES}, mems


def train_loop(xp: Any, corpus: Corpus, steps: int, cfg: Config = Config(), seed: int = 0,
               to_array: Callable[[np.ndarray], Any] = lambda a: a) -> tuple[list[Any], Params]:
    """The original training loop on ``xp``; returns the loss of every step (values of
    ``xp``, not read back, so that a lazy mode keeps running) and the final parameters.
    ``to_array`` puts the initial parameters where ``xp`` computes."""
    host = init_params(corpus.vocab, cfg.hidden, seed)
    params = {k: to_array(v) for k, v in host.items()}
    mems = {k: to_array(np.zeros_like(v)) for k, v in host.items()}
    onehot = np.eye(corpus.vocab, dtype=np.float32)[:, :, None]
    zero = to_array(np.zeros((cfg.hidden, 1), np.float32))
    losses, hprev = [], zero
    for inputs, targets, reset in batches(corpus, cfg, steps):
        if reset:
            hprev = zero
        loss, grads, hprev = loss_fun(xp, params, inputs, targets, hprev, onehot)
        params, mems = adagrad(xp, params, grads, mems, cfg.lr)
        losses.append(loss)
    return losses, params


def train_numpy(corpus: Corpus, steps: int, cfg: Config = Config(), seed: int = 0) -> tuple[list[float], Params]:
    """The reference: the original program on NumPy."""
    losses, params = train_loop(np, corpus, steps, cfg, seed)
    return [float(v) for v in losses], params


# ------------------------------------------------------------ scan + grad + jit


def rnn_loss(params: Params, hprev: Any, inputs: Any, targets: Any) -> tuple[Any, Any]:
    """The same model for ``axle.grad``: the recurrence is a scan, and what does not depend
    on it (the input projection, a gather of Wxh's columns; the output layer and the
    softmax of all steps) is computed outside the loop. Returns (loss, last hidden state)."""
    Wxh, Whh, Why, bh, by = (params[k] for k in NAMES)
    xw = anp.transpose(anp.take(Wxh, inputs, axis=1, mode="clip"))  # [seq, hidden]: Wxh @ onehot

    def step(h: Any, x: Any) -> tuple[Any, Any]:
        h = anp.tanh(x + anp.matmul(Whh, h) + bh[:, 0])
        return h, h

    h, hs = lax.scan(step, hprev[:, 0], xw)
    logits = anp.matmul(hs, anp.transpose(Why)) + by[:, 0]  # [seq, vocab]
    logp = logits - anp.log(anp.sum(anp.exp(logits), axis=1, keepdims=True))
    loss = -anp.sum(anp.take_along_axis(logp, targets[:, None], axis=1, mode="clip"))
    return loss, h[:, None]


def make_train_step(cfg: Config = Config(), device: Any = None) -> Callable[..., Any]:
    """``(params, mems, hprev, inputs, targets) -> (params, mems, h, loss)``: one jitted
    step (loss, gradient, clipping and the Adagrad update)."""
    def step(params: Params, mems: Params, hprev: Any, inputs: Any, targets: Any) -> Any:
        (loss, h), grads = axle.value_and_grad(rnn_loss, has_aux=True)(params, hprev, inputs, targets)
        grads = tree_util.tree_map(lambda g: anp.clip(g, -5, 5), grads)
        params, mems = adagrad(anp, params, grads, mems, cfg.lr)
        return params, mems, h, loss

    return axle.jit(step, device=device)


def train_jit(corpus: Corpus, steps: int, cfg: Config = Config(), seed: int = 0,
              device: Any = None) -> tuple[list[float], Params]:
    """Training with the jitted step; returns the loss of every step and the parameters."""
    step = make_train_step(cfg, device)
    host = init_params(corpus.vocab, cfg.hidden, seed)
    params = axle.device_put(host, device)
    mems = axle.device_put({k: np.zeros_like(v) for k, v in host.items()}, device)
    zero = np.zeros((cfg.hidden, 1), np.float32)
    losses, hprev = [], zero
    for inputs, targets, reset in batches(corpus, cfg, steps):
        params, mems, hprev, loss = step(params, mems, zero if reset else hprev, inputs, targets)
        losses.append(loss)
    return [float(v) for v in losses], params


def sample(params: Params, corpus: Corpus, n: int = 120, seed: int = 0) -> str:
    """``n`` characters drawn from the model (NumPy), from a zero state and the text's first one."""
    p = {k: np.asarray(v) for k, v in params.items()}
    rng = np.random.default_rng(seed)
    h, ix, out = np.zeros((p["Whh"].shape[0], 1), np.float32), int(corpus.ix[0]), []
    for _ in range(n):
        h = np.tanh(p["Wxh"][:, ix:ix + 1] + p["Whh"] @ h + p["bh"])
        y = (p["Why"] @ h + p["by"])[:, 0].astype(np.float64)
        prob = np.exp(y - y.max())
        ix = int(rng.choice(corpus.vocab, p=prob / prob.sum()))
        out.append(corpus.chars[ix])
    return "".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--mode", choices=("jit", "eager", "auto"), default="jit")
    args = ap.parse_args()
    corpus = Corpus.of()
    t0 = time.perf_counter()
    want, _ = train_numpy(corpus, args.steps)
    t_np = time.perf_counter() - t0
    axle.reset_stats()
    t0 = time.perf_counter()
    if args.mode == "jit":
        got, params = train_jit(corpus, args.steps, device=args.device)
    else:
        if args.mode == "auto":
            axle.config.update(jit_level="auto")
        dev = args.device
        losses, params = train_loop(anp, corpus, args.steps, to_array=lambda a: axle.device_put(a, dev))
        got = [float(v) for v in losses]
    t_axle = time.perf_counter() - t0
    stats = axle.stats()
    for n in range(0, args.steps, max(1, args.steps // 10)):
        print(f"step {n:5d}  loss {got[n]:9.4f}  (numpy {want[n]:9.4f})")
    print(f"max |loss - numpy loss| = {max(abs(a - b) for a, b in zip(got, want)):.2e}")
    print(f"{args.mode}: {stats['compiles']} compiles, {stats['clusters']} clusters; "
          f"{1e3 * t_axle / args.steps:.2f} ms per step (first call included), numpy {1e3 * t_np / args.steps:.2f} ms")
    print("sample:", repr(sample(params, corpus)))


if __name__ == "__main__":
    main()
