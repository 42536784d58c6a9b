"""Correctness of tinynorm.rms_norm against a NumPy reference, on one device and sharded."""

import multiprocessing as mp

import numpy as np
import pytest
from tinynorm import rms_norm
from tinynorm.devices import bind, device_count


def reference(x, w, eps=1e-6):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


@pytest.mark.parametrize("shape", [(1, 1), (4, 64), (8, 256), (3, 257)])
def test_correctness(shape):
    rng = np.random.default_rng(sum(shape))
    x, w = rng.standard_normal(shape) * 3.0, rng.standard_normal(shape[1])
    x_copy = x.copy()
    np.testing.assert_allclose(rms_norm(x, w), reference(x, w), rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(x, x_copy)  # the input is left as it was


def test_zero_rows_stay_finite():
    assert np.isfinite(rms_norm(np.zeros((2, 8)), np.ones(8))).all()


def _shard(rank, world_size, h):
    bind(rank)  # one device per rank, as a distributed test binds cuda:<rank>
    rng = np.random.default_rng(h)
    x, w = rng.standard_normal((world_size * 2, h)), rng.standard_normal(h)
    part = x[rank * 2:(rank + 1) * 2]
    np.testing.assert_allclose(rms_norm(part, w), reference(part, w), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("world_size", [4])
def test_sharded_rms_norm(world_size):
    """Rows split over world_size processes, one device each."""
    procs = [mp.Process(target=_shard, args=(rank, world_size, 64)) for rank in range(world_size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert [p.exitcode for p in procs] == [0] * world_size, "a rank failed (see its stderr)"


@pytest.mark.skipif(device_count() < 8, reason="needs 8 devices (a multi-GPU host)")
def test_sharded_rms_norm_eight_ranks():
    test_sharded_rms_norm(8)
