"""Planted-effect kernel (GPU, cupy): WORK dependent FMAs per thread on a fixed grid, so its GPU time
is proportional to WORK. The decision-quality benchmark edits only WORK: a candidate differs from
BEST by exactly that much extra or removed work."""

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

def launch(y, b: float) -> None:
    """y[i] = threadIdx + WORK * b, through WORK dependent FMAs per thread, on the current stream."""
    _KERNEL((BLOCKS,), (THREADS,), (y, np.float32(1.0), np.float32(b), np.int64(WORK)))
