"""The oracle for the Triton softmax example (protected: a candidate may not edit it).

``reference(x)`` is ``torch.softmax`` over the last dimension in float32, whatever the input
dtype. ``count_errors(out, ref, dtype)`` is the correctness rule the benchmark reports as
``err_count``: the number of elements with ``|out - ref| > atol + rtol * |ref|``, plus the number
of NaNs in ``out``. It must be 0 on every config class.

Tolerances are set by the output dtype. A kernel that does its math in float32 and rounds once
at the end is off by at most about one unit in the last place of the output dtype:
- float16: 2**-11 relative (4.9e-4) for normal values; outputs of long rows are tiny (1/32000 is
  3e-5, under float16's smallest normal 6.1e-5), where the spacing is 6e-8 absolute. So
  rtol = 2e-3 (four half-ulps) and atol = 1e-6 (sixteen subnormal steps): loose enough for
  rounding, tight enough that a denominator off by a fraction of a percent is caught even on
  long rows (a large atol such as 1e-3 would pass any output of a 32000-column row).
- bfloat16: 2**-8 relative per ulp, so rtol = 1.6e-2 (two ulps).
- float32: rtol = 1e-5, atol = 1e-7.
"""

import torch

# dtype -> (atol, rtol)
TOLERANCES = {
    torch.float16: (1e-6, 2e-3),
    torch.bfloat16: (1e-6, 1.6e-2),
    torch.float32: (1e-7, 1e-5),
}


def reference(x: torch.Tensor) -> torch.Tensor:
    """Row-wise softmax of a 2-D tensor, computed in float32."""
    return torch.softmax(x.float(), dim=-1)


def count_errors(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> int:
    """Elements of ``out`` outside tolerance of ``ref``, plus NaNs; every element if the shape is wrong."""
    if not isinstance(out, torch.Tensor) or out.shape != ref.shape or out.dtype != dtype:
        return ref.numel()
    atol, rtol = TOLERANCES[dtype]
    o = out.float()
    bad = (o - ref).abs() > atol + rtol * ref.abs()  # NaN compares False: counted below
    return int(bad.sum().item()) + int(torch.isnan(o).sum().item())
