"""Adversarial candidate: launches on a non-blocking side stream, so the benchmark's events on the
default stream time almost nothing; the work is the same (same kernel, same launches)."""

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
_SIDE = cp.cuda.Stream(non_blocking=True)


def launch(y, b: float) -> None:
    with _SIDE:
        _KERNEL((BLOCKS,), (THREADS,), (y, np.float32(1.0), np.float32(b), np.int64(WORK)))
