"""Fixed benchmark for the Triton softmax example (protected: a candidate may not edit it).

One row of results/bench.csv per config class (M, N, dtype), columns exactly
``M,N,dtype,us_per_call,err_count``; the file is overwritten on every run.

Per class:
1. BURST fresh random inputs of shape (M, N) (torch.randn with a fresh seed: never zeros,
   never the same data twice);
2. correctness: ``err_count`` from reference.count_errors (float32 torch.softmax oracle),
   summed over the inputs;
3. timing with ``triton.testing.do_bench(burst, return_mode="median")``: one timed sample is a
   burst of BURST calls, one per input, every output kept alive until the burst ends (so each
   call reads its input from DRAM and writes fresh memory; do_bench clears the L2 cache before
   each sample and times with CUDA events). ``us_per_call`` = median sample / BURST, taken as
   the median over ROUNDS do_bench windows that alternate between the classes.
   Why these sizes, bursts and rounds (all measured on an H100, Triton 3.6): CUDA-event
   timestamps come in steps of ~0.7 us, so the median of single ~30 us calls hops between levels
   ~2% apart; and the host needs 22-49 us (varying from process to process) to launch one call,
   so a class of ~30 us per call is sometimes timed at the host's pace, 10-16% slow. With
   ~100-200 us per call and bursts of 4, one timestamp step is ~0.1% of a call and the GPU
   stays ahead of the host; the median of 5 windows outvotes a slow window. Identical code then
   reads the same within ~0.3% from run to run, under the server's 1% noise rule;
4. every input is refilled in place with new random values and checked again, so an
   implementation that caches results by pointer or skips work after the first call fails.

Environment:
- ``KOPT_PROFILE=1``: the server runs this under a replaying profiler (Nsight Compute; not under
  the CUPTI trace, whose runs are the verdict's timed runs). No do_bench: one correctness call,
  then three plain calls; ``us_per_call`` is a placeholder from one CUDA-event timing. The
  oracle then runs on the CPU, so the only GPU kernels whose names contain "softmax" are the
  candidate's (torch.softmax on the GPU would launch softmax_warp_forward).
- ``KOPT_EXAMPLE_SMALL=1``: small shapes (same N, few rows) for checks without a GPU; with no
  CUDA device the tensors are on the CPU, which needs ``TRITON_INTERPRET=1``.
"""

import csv
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from kernel import softmax
from reference import count_errors, reference

# (M, N, dtype). Memory-bound sizes that fill an H100 (132 SMs): 120-134 MB read + the same written.
CLASSES = [
    (302592, 197, torch.float16),  # short rows: ViT-B/16 attention, 128 images x 12 heads x 197 queries
    (4096, 16384, torch.float16),  # wide rows
    (2048, 32000, torch.float16),  # long rows: LLaMA-vocabulary logits, 2048 tokens
]
SMALL_CLASSES = [(37, 197, torch.float16), (3, 16384, torch.float16), (2, 32000, torch.float16)]

WARMUP_MS = 25  # first window of each class; later windows 5
REP_MS = 60  # per window
ROUNDS = 5  # do_bench windows per class, alternating between classes
BURST = 4  # calls per timed sample (2 with KOPT_EXAMPLE_SMALL: the CPU interpreter is slow)

HERE = Path(__file__).resolve().parent
CSV_PATH = HERE / "results" / "bench.csv"
COLUMNS = ["M", "N", "dtype", "us_per_call", "err_count"]


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def _check(x: torch.Tensor, oracle_on_cpu: bool = False) -> int:
    out = softmax(x)
    if oracle_on_cpu:
        return count_errors(out.cpu() if isinstance(out, torch.Tensor) else out, reference(x.cpu()), x.dtype)
    return count_errors(out, reference(x), x.dtype)


def _time_once_us(fn, cuda: bool) -> float:
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e6


def _row(M: int, N: int, dtype: torch.dtype, us: float, errors: int) -> dict:
    return {"M": M, "N": N, "dtype": str(dtype).replace("torch.", ""), "us_per_call": us, "err_count": errors}


def profile_class(M: int, N: int, dtype: torch.dtype, device: str) -> dict:
    """Under the profiler: one correctness call, then three plain calls (the last one timed)."""
    x = torch.randn(M, N, device=device, dtype=dtype)
    errors = _check(x, oracle_on_cpu=True)
    fn = lambda: softmax(x)  # noqa: E731
    fn()
    fn()
    us = _time_once_us(fn, device == "cuda")
    x.normal_()
    errors += _check(x, oracle_on_cpu=True)
    return _row(M, N, dtype, us, errors)


def bench_classes(classes: list, device: str, burst: int) -> list:
    cuda = device == "cuda"
    inputs = []
    errors = []
    for M, N, dtype in classes:
        xs = [torch.randn(M, N, device=device, dtype=dtype) for _ in range(burst)]
        inputs.append(xs)
        errors.append(sum(_check(x) for x in xs))

    samples: list[list[float]] = [[] for _ in classes]
    for r in range(ROUNDS if cuda else 1):
        for i, xs in enumerate(inputs):

            def run_burst(xs=xs):
                return [softmax(x) for x in xs]  # every output alive until the burst ends

            if cuda:
                import triton.testing

                ms = triton.testing.do_bench(run_burst, warmup=WARMUP_MS if r == 0 else 5, rep=REP_MS,
                                             return_mode="median")
                samples[i].append(ms * 1e3 / burst)
            else:  # interpreter on the CPU: only correctness means anything
                samples[i].append(_time_once_us(run_burst, cuda) / burst)

    rows = []
    for (M, N, dtype), xs, err, us in zip(classes, inputs, errors, samples):
        for x in xs:
            x.normal_()  # new values in the same storage
        err += sum(_check(x) for x in xs)
        rows.append(_row(M, N, dtype, statistics.median(us), err))
    return rows


def main() -> int:
    small = _flag("KOPT_EXAMPLE_SMALL")
    profile = _flag("KOPT_PROFILE")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        print("bench.py: no CUDA device; set TRITON_INTERPRET=1 (and KOPT_EXAMPLE_SMALL=1) to run on the CPU",
              file=sys.stderr)
        return 2
    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    classes = SMALL_CLASSES if small else CLASSES
    burst = 2 if small else BURST
    if profile:
        rows = [profile_class(M, N, dtype, device) for M, N, dtype in classes]
    else:
        rows = bench_classes(classes, device, burst)

    CSV_PATH.parent.mkdir(parents=True, exist_ok=True)
    tmp = CSV_PATH.with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({**r, "us_per_call": f"{r['us_per_call']:.3f}"})
    os.replace(tmp, CSV_PATH)

    name = torch.cuda.get_device_name() if device == "cuda" else "cpu (interpreter)"
    if profile:
        mode = "profile mode (one call, placeholder)"
    elif device == "cuda":
        mode = f"median of {ROUNDS} do_bench windows, bursts of {burst} calls"
    else:
        mode = "wall clock (interpreter: not a speed measurement)"
    print(f"device: {name}; seed {seed}; timing: {mode}")
    for r in rows:
        print(f"M={r['M']:>6} N={r['N']:>6} {r['dtype']:>8}  {r['us_per_call']:10.2f} us  err_count={r['err_count']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
