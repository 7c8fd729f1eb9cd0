"""examples/digits_cnn.py: the small CNN reaches >= 97% test accuracy on scikit-learn's
digits on every compiling device (the issue's bar), with the example's own settings."""
from __future__ import annotations

import numpy as np
import pytest
from example_loader import load_example

D = load_example("digits_cnn")


@pytest.fixture(scope="module")
def digits():  # noqa: ANN201
    return D.load_digits()


@pytest.mark.parametrize("device", ["cpu:0", "opencl:0", "template:0"])
def test_digits_cnn_reaches_97_percent(digits, device: str) -> None:  # noqa: ANN001
    res = D.train(digits, device=device)
    assert len(res.losses) == 8 * (len(digits.x_train) // 64)
    assert np.isfinite(res.losses).all()
    assert np.mean(res.losses[-10:]) < 0.2 * np.mean(res.losses[:10])  # it learned
    assert res.accuracy >= 0.97, res.accuracy


def test_images_are_nchw(digits) -> None:  # noqa: ANN001
    x = D.images(digits.x_test)
    assert x.shape == (len(digits.x_test), 1, 8, 8)
    np.testing.assert_array_equal(x[3, 0, 2], digits.x_test[3, 16:24])
    logits = np.asarray(D.logits_fn(D.init(0), x[:5]))
    assert logits.shape == (5, 10) and np.isfinite(logits).all()
