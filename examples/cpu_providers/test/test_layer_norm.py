"""Correctness of tinynorm.layer_norm against a NumPy reference."""

import numpy as np
import pytest
from tinynorm import layer_norm


@pytest.mark.parametrize("shape", [(1, 2), (4, 64), (3, 257)])
def test_correctness(shape):
    rng = np.random.default_rng(sum(shape))
    x, w, b = rng.standard_normal(shape), rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    mean = x.mean(axis=-1, keepdims=True)
    want = (x - mean) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5) * w + b
    np.testing.assert_allclose(layer_norm(x, w, b), want, rtol=1e-10, atol=1e-12)
