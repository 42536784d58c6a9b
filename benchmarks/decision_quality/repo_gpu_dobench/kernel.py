"""Planted-effect kernel (GPU, Triton): WORK dependent FMAs per element on a fixed grid, so its GPU
time is proportional to WORK. The decision-quality benchmark edits only WORK: a candidate differs
from BEST by exactly that much extra or removed work."""

import torch
import triton
import triton.language as tl

WORK = 20000
BLOCKS, THREADS = 132 * 8, 256


@triton.jit
def spin_kernel(y_ptr, a, b, iters, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    acc = (offs % BLOCK).to(tl.float32)
    for _ in range(iters):
        acc = acc * a + b
    tl.store(y_ptr + offs, acc)


def launch(y: torch.Tensor, b: float) -> None:
    """y[i] = (i % THREADS) + WORK * b (a = 1), through WORK dependent FMAs per element, on torch's stream."""
    spin_kernel[(BLOCKS,)](y, 1.0, b, WORK, BLOCK=THREADS, num_warps=THREADS // 32)
