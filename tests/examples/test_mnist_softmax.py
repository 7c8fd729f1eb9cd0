"""examples/mnist_softmax.py: accuracy on the digits data in jit and no-jit mode with
matching loss curves, IDX reading (gz or not) on tiny generated files, clear data errors."""
from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest


def write_idx(path, array, compress):
    arr = np.ascontiguousarray(array, dtype=np.uint8)
    head = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    opener = gzip.open if compress else open
    with opener(path + (".gz" if compress else ""), "wb") as f:
        f.write(head + arr.tobytes())


def make_tiny_mnist(folder, n_train=300, n_test=100, compress=True, seed=0):
    """28x28 images where class c lights up row band c (plus noise): linearly separable."""
    rng = np.random.default_rng(seed)

    def images(labels):
        x = rng.integers(0, 60, size=(len(labels), 28, 28))
        for i, c in enumerate(labels):
            x[i, 2 * c + 3:2 * c + 6, 4:24] = 200 + rng.integers(0, 55)
        return x

    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n)
        write_idx(str(folder / f"{prefix}-images-idx3-ubyte"), images(labels), compress)
        write_idx(str(folder / f"{prefix}-labels-idx1-ubyte"), labels, compress)


@pytest.fixture(scope="module")
def digits_runs(mnist_example):
    data = mnist_example.load_digits()
    jit = mnist_example.train(data, use_jit=True, device="interpreter:0")
    eager = mnist_example.train(data, use_jit=False, device="interpreter:0")
    return jit, eager


def test_digits_accuracy_jit_and_no_jit(digits_runs):
    jit, eager = digits_runs
    assert len(jit.losses) == len(eager.losses) == 1000
    assert jit.accuracy >= 0.90 and eager.accuracy >= 0.90
    assert jit.steps_per_second > 0 and eager.steps_per_second > 0


def test_loss_curves_match(digits_runs):
    jit, eager = digits_runs
    np.testing.assert_allclose(jit.losses, eager.losses, rtol=1e-4, atol=1e-5)
    assert jit.losses[-1] < jit.losses[0] / 3  # it learned


def test_auto_mode_training_matches_jit(mnist_example, digits_runs):
    """The eager training step under jit_level=auto: one cached cluster per step."""
    import axle

    data = mnist_example.load_digits()
    previous = axle.config.jit_level
    axle.config.update(jit_level="auto")
    try:
        axle.reset_stats()
        auto = mnist_example.train(data, use_jit=False, steps=60, device="interpreter:0")
        s = axle.stats()
    finally:
        axle.config.update(jit_level=previous)
    assert s["eager_ops"] == 0 and s["clusters"] >= 60 and s["compiles"] <= 5
    np.testing.assert_allclose(auto.losses, digits_runs[0].losses[:60], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("compress", [True, False], ids=["gz", "raw"])
def test_tiny_idx_files(mnist_example, tmp_path, compress, capsys):
    make_tiny_mnist(tmp_path, compress=compress)
    data = mnist_example.load_mnist(str(tmp_path))
    assert data.x_train.shape == (300, 784) and data.x_train.dtype == np.float32
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    res = mnist_example.main(["--data-dir", str(tmp_path), "--steps", "60", "--device", "interpreter:0"])
    out = capsys.readouterr().out
    assert "test accuracy:" in out and "steps/second:" in out and "784 features" in out
    assert res.accuracy >= 0.9


def test_read_idx_round_trip_and_errors(mnist_example, tmp_path):
    arr = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(str(tmp_path / "a-idx3-ubyte"), arr, compress=True)
    np.testing.assert_array_equal(mnist_example.read_idx(str(tmp_path / "a-idx3-ubyte.gz")), arr)
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(mnist_example.DataError, match="magic"):
        mnist_example.read_idx(str(tmp_path / "bad"))
    (tmp_path / "short").write_bytes(struct.pack(">BBBBI", 0, 0, 8, 1, 10) + b"\x00" * 3)
    with pytest.raises(mnist_example.DataError, match="expected 10"):
        mnist_example.read_idx(str(tmp_path / "short"))
    with pytest.raises(mnist_example.DataError, match="train-images"):
        mnist_example.load_mnist(str(tmp_path))


def test_clear_message_without_scikit_learn(mnist_example, monkeypatch, capsys):
    import builtins

    real_import = builtins.__import__

    def no_sklearn(name, *a, **kw):
        if name.startswith("sklearn"):
            raise ImportError("no sklearn")
        return real_import(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_sklearn)
    with pytest.raises(SystemExit) as e:
        mnist_example.main([])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "scikit-learn" in err and "--data-dir" in err
