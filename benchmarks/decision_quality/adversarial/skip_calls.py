"""Adversarial candidate: returns early on every other call, as a cache of earlier results would
(the benchmark checks only the last call, which this candidate does compute), so half the calls
look free."""

import cupy as cp
import numpy as np

WORK = 20000

SOURCE = r"""
extern "C" __global__ void spin_kernel(float* y, float a, float b, long long iters) {
    float acc = (float)threadIdx.x;
    for (long long k = 0; k < iters; ++k) {
        acc = fmaf(acc, a, b);
    }
    y[blockIdx.x * (long long)blockDim.x + threadIdx.x] = acc;
}
"""
_KERNEL = cp.RawKernel(SOURCE, "spin_kernel")
BLOCKS, THREADS = 132 * 8, 256
_CALLS = [0]


def launch(y, b: float) -> None:
    _CALLS[0] += 1
    if _CALLS[0] % 2:
        return
    _KERNEL((BLOCKS,), (THREADS,), (y, np.float32(1.0), np.float32(b), np.int64(WORK)))
