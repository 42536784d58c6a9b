"""A small GPU workload whose floating-point work is known, for recording ncu's FLOP counters (issue 38 item 3).

Launches, in order (each RUNS times): a fp32 GEMM with TF32 off (cuBLAS SGEMM: FFMA on the CUDA cores),
a fp16 GEMM (tensor cores, fp32 accumulate), a bf16 GEMM (tensor cores), and a fp32 elementwise a * b + c
(torch's vectorized kernel: FFMA or FMUL + FADD). Sizes: M = N = K = 4096 for the GEMMs (2 x 4096^3 =
137.4 GFLOP each), 2^26 elements for the elementwise op. Prints the expected FLOPs per launch so the
recorded ncu page can be read against them. Run: `python workload.py [RUNS]` (default 2).
"""

from __future__ import annotations

import sys

import torch


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    n = 4096
    gemm_flop = 2 * n**3
    a32, b32 = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    a16, b16 = a32.half(), b32.half()
    abf, bbf = a32.bfloat16(), b32.bfloat16()
    e = 1 << 26
    x, y, z = (torch.randn(e, device="cuda") for _ in range(3))
    for _ in range(runs):
        torch.mm(a32, b32)
        torch.mm(a16, b16)
        torch.mm(abf, bbf)
        torch.addcmul(z, x, y)
    torch.cuda.synchronize()
    print(f"expected FLOP per launch: gemm fp32/fp16/bf16 {gemm_flop:.4e} each; addcmul {2 * e:.4e} (one FMA per element)")


if __name__ == "__main__":
    main()
