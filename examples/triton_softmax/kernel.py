"""Row-wise softmax in Triton: the kernel under optimization.

``softmax(x)`` takes a 2-D CUDA tensor of float16, bfloat16 or float32 and returns
``exp(x - rowmax) / rowsum`` over the last dimension in the same dtype, with the math in float32.
(CPU tensors are accepted only under Triton's interpreter, ``TRITON_INTERPRET=1``, for
correctness checks without a GPU.)

Baseline: one program per row; the whole row sits in one block of next_power_of_2(n_cols)
lanes (one read and one write of the row); num_warps=4 for every shape.
"""

import os

import torch
import triton
import triton.language as tl

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_COLS = 65536  # the whole row lives in registers


@triton.jit
def softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    x = tl.load(in_ptr + row * in_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    den = tl.sum(num, axis=0)
    y = num / den
    tl.store(out_ptr + row * out_row_stride + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


def _check_input(x: torch.Tensor) -> None:
    if x.ndim != 2:
        raise ValueError(f"softmax expects a 2-D tensor, got {x.ndim}-D")
    if x.dtype not in _DTYPES:
        raise TypeError(f"softmax supports float16, bfloat16 and float32, got {x.dtype}")
    if not x.is_cuda and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError("softmax expects a CUDA tensor (CPU only under TRITON_INTERPRET=1)")
    if x.shape[1] > _MAX_COLS:
        raise ValueError(f"rows longer than {_MAX_COLS} columns are not supported")


def softmax(x: torch.Tensor) -> torch.Tensor:
    _check_input(x)
    if x.stride(1) != 1:
        x = x.contiguous()
    n_rows, n_cols = x.shape
    out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    if n_rows == 0 or n_cols == 0:
        return out
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    softmax_kernel[(n_rows,)](
        out, x, x.stride(0), out.stride(0), n_cols, BLOCK_SIZE=BLOCK_SIZE, num_warps=4
    )
    return out
