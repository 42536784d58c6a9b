"""Correctness of kernel.rms_norm against the reference (the example's [correctness] command)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import kernel  # noqa: E402
import reference  # noqa: E402


@pytest.mark.parametrize("shape", [(1, 1), (4, 256), (32, 1024), (3, 4097)])
def test_matches_reference(shape):
    rng = np.random.default_rng(sum(shape))
    x, w = rng.standard_normal(shape) * 3.0, rng.standard_normal(shape[1])
    x_copy = x.copy()
    np.testing.assert_allclose(kernel.rms_norm(x, w), reference.rms_norm(x, w), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(x, x_copy)  # the input is left as it was


def test_zero_rows_stay_finite():
    x, w = np.zeros((2, 8)), np.ones(8)
    assert np.isfinite(kernel.rms_norm(x, w)).all()
