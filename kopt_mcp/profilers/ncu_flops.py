"""Floating-point work and its peak from Nsight Compute's counters (issue 38 item 3: speed of light in FLOP/s).

Per math path, the work a launch did (operations; a fused multiply-add counts 2) and the device's peak
rate for it (operations per second at the SM clock the launch ran at), read from ncu's raw page:

- CUDA cores, one path per precision, the terms of ncu's own roofline: fp32 = FADD + FMUL + 2 x FFMA
  thread instructions (`sm__sass_thread_inst_executed_op_{fadd,fmul,ffma}_pred_on.sum`), peak = FFMA's
  `.sum.peak_sustained` x 2 x the SM clock (the fastest SM's, `sm__cycles_elapsed.max.per_second`, where
  the page has it, else `.avg.per_second`, which ncu's roofline uses); fp16 (HADD, HMUL, HFMA) and fp64
  (DADD, DMUL, DFMA) the same way;
- tensor cores, one path per source type: `sm__ops_path_tensor_src_<type>.sum` already counts
  operations, peak = its `.sum.peak_sustained` x the SM clock.

Recorded on one H200 (2026-12-02, tests/fixtures/ncu/h200_flops_workload_raw.csv): a 4096^3 fp32 GEMM
(TF32 off) executed 68,736,253,952 FFMA (2 x that = 1.0002 x 2 x 4096^3) in 2,692 us: 51.1 TFLOP/s,
76.8% of the 66.5 TFLOP/s fp32 peak at the average SM clock (16,896 FFMA per cycle x 2 x 1.968 GHz), 76.5%
of 66.7 TFLOP/s at the fastest SM's (1.974 GHz: the clock the check uses); the fp16 GEMM read
`sm__ops_path_tensor_src_fp16.sum` = 137,438,953,472 = 2 x 4096^3 in 184.5 us: 745 TOP/s. That path's
peak counter on the H200 is 1,081,344 ops per cycle (1.65-2.14 POP/s at 1.52-1.98 GHz), twice NVIDIA's
dense fp16 figure (989 TFLOP/s): the counter's peak is the sparse rate, so a dense kernel's % of the
tensor peak reads half its datasheet %; the beyond-peak check is the more lenient for it, never
stricter.

Cost, measured there (benchmarks/results/2026-12-02-h200-flop-counters.md): the confirmation's metrics
(GPU time, DRAM bytes) need 1 replay pass; with the CUDA-core counters 3, with the tensor paths too 8,
and a 16 MiB (L2-resident) softmax then read +4.2% longer (20.93 -> 21.81 us median, 40 launches): so
the counters are asked for only where `[profiler] confirm_flops` is on, for BEST and the candidate
alike. The names were all accepted by ncu 2025.3 on an H200 (Hopper); an older GPU may lack a tensor path
(fp8), and ncu then refuses the run: the confirmation comes back `unavailable` with ncu's message.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["CORE_PATHS", "FLOP_METRICS", "TENSOR_PATHS", "flop_fields"]

_SASS = "sm__sass_thread_inst_executed_op_{}_pred_on.sum"
_CLOCK = "sm__cycles_elapsed.avg.per_second"
#: the fastest SM's clock of the launch, where ncu wrote it (its raw page carries every rollup of the metric
#: asked for): a peak at it is the highest the launch could reach, so a refusal never rests on a slow pass's clock
_CLOCK_MAX = "sm__cycles_elapsed.max.per_second"
#: CUDA-core paths: name -> (add, multiply, fused multiply-add) instruction kinds
CORE_PATHS: dict[str, tuple[str, str, str]] = {
    "fp32": ("fadd", "fmul", "ffma"), "fp16": ("hadd", "hmul", "hfma"), "fp64": ("dadd", "dmul", "dfma")}
#: tensor-core paths: name -> ncu's source-type suffix (the six this ncu lists on an H200)
TENSOR_PATHS: dict[str, str] = {
    "tensor fp16": "fp16", "tensor bf16": "bf16_dst_fp32", "tensor tf32": "tf32_dst_fp32",
    "tensor fp8": "fp8", "tensor fp64": "fp64", "tensor int8": "int8"}


def _tensor(suffix: str) -> str:
    return f"sm__ops_path_tensor_src_{suffix}.sum"


#: every metric the FLOP paths read (counts, peaks, the SM clock), in ncu's spelling
FLOP_METRICS: tuple[str, ...] = (
    *(_SASS.format(op) for ops in CORE_PATHS.values() for op in ops),
    *(_SASS.format(ops[2]) + ".peak_sustained" for ops in CORE_PATHS.values()),
    *(_tensor(s) for s in TENSOR_PATHS.values()),
    *(_tensor(s) + ".peak_sustained" for s in TENSOR_PATHS.values()),
    _CLOCK,
)


def flop_fields(value: Callable[[str], float | None]) -> dict[str, float]:
    """One launch's work and peaks: `value(metric)` gives the launch's number for an ncu metric name (None
    where absent). Returns "flops <path>" (operations, 0.0 included: a kernel's rate is its mean work over all
    its launches / its mean time) for each path whose counters ncu wrote, and "flop_peak <path>" (operations
    per second, at the fastest SM's clock where written, else the average) for each path whose peak and
    clock were measured; {} where ncu recorded no FLOP counter. Never raises."""
    clock = value(_CLOCK_MAX) or value(_CLOCK)
    out: dict[str, float] = {}
    for path, (add, mul, fma) in CORE_PATHS.items():
        terms = [value(_SASS.format(op)) for op in (add, mul, fma)]
        if any(t is not None for t in terms):  # 0.0 too: a launch without such work lowers the kernel's mean
            out[f"flops {path}"] = (terms[0] or 0.0) + (terms[1] or 0.0) + 2.0 * (terms[2] or 0.0)
        peak = value(_SASS.format(fma) + ".peak_sustained")
        if peak and clock:
            out[f"flop_peak {path}"] = 2.0 * peak * clock
    for path, suffix in TENSOR_PATHS.items():
        work = value(_tensor(suffix))
        if work is not None:
            out[f"flops {path}"] = work
        peak = value(_tensor(suffix) + ".peak_sustained")
        if peak and clock:
            out[f"flop_peak {path}"] = peak * clock
    return out
