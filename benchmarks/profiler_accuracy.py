"""Profiler GPU time vs CUDA events for the same kernel, and the wall-time cost of profiling.

Needs an NVIDIA GPU, torch, triton, ncu and cupti-python. Usage:
    python benchmarks/profiler_accuracy.py OUT_DIR
Writes OUT_DIR/profiler_accuracy.md. Parts:
1. Accuracy: the Triton example's baseline softmax kernel on each config class. CUDA-event time per
   launch, two ways: (a) events around 50 back-to-back launches, median of 20 batches; (b) events
   around one launch queued behind torch.cuda._sleep, so the host's launch latency is hidden and
   no inter-launch gap is counted, median of 40. Against: the CUPTI kernel trace backend (mean of
   40 launches, as the keep metric sums them) and Nsight Compute gpu__time_duration.sum (median of
   30 launches) with `--clock-control none`, cache control `all` (ncu's default) and `none`.
2. Overhead: wall time of the example's benchmark in profile mode (KOPT_PROFILE=1) plain, under
   the CUPTI trace (the NVIDIA keep metric), ncu timing metrics and ncu detail metrics (the trace report).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "triton_softmax"
CLASSES = [(302592, 197), (4096, 16384), (2048, 32000)]
BATCH = 50


def child(mode: str, m: int, n: int) -> None:
    """Runs inside the measured process: `events` prints the median us; `launch` just launches."""
    import torch

    sys.path.insert(0, str(EXAMPLE))
    from kernel import softmax

    x = torch.randn(m, n, device="cuda", dtype=torch.float16)
    for _ in range(10):
        softmax(x)
    torch.cuda.synchronize()
    if mode == "events":
        # events around BATCH back-to-back launches, so the GPU never waits for the host's launch
        # (around one synchronized launch, the event pair also times the launch latency)
        times = []
        for _ in range(20):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(BATCH):
                softmax(x)
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1000.0 / BATCH)
        print(f"EVENTS_US {statistics.median(times):.3f}")
        single = []
        for _ in range(40):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(2_000_000)  # keeps the stream busy while the host enqueues a, kernel, b
            a.record()
            softmax(x)
            b.record()
            b.synchronize()
            single.append(a.elapsed_time(b) * 1000.0)
        print(f"SINGLE_US {statistics.median(single):.3f}")
    else:
        for _ in range(30):
            softmax(x)
        torch.cuda.synchronize()


def ncu_median(m: int, n: int, out: Path, cache: str) -> float:
    from kopt_mcp.profilers.ncu import parse_ncu_csv

    csv = out / f"ncu_{m}x{n}_{cache}.csv"
    cmd = ["ncu", "--clock-control", "none", "--cache-control", cache, "--csv", "--page", "raw", "--metrics",
           "gpu__time_duration.sum", "-k", "regex:softmax", "--launch-skip", "10", "--log-file", str(csv),
           sys.executable, __file__, "--child", "launch", str(m), str(n)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    import csv as csvmod

    lines = [ln for ln in csv.read_text().splitlines() if not ln.startswith("==")]
    rows = list(csvmod.reader(lines))
    head = rows[0]
    i = head.index("gpu__time_duration.sum")
    unit = rows[1][i]
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[unit]
    vals = [float(r[i].replace(",", "")) * scale for r in rows[2:] if len(r) == len(head)]
    assert parse_ncu_csv(csv).kernels, "the backend's parser must read the same file"
    return statistics.median(vals)


def cupti_mean(m: int, n: int, out: Path) -> float:
    """Mean GPU time (us) per launch of the softmax kernel in the CUPTI backend's trace of `launch`."""
    from kopt_mcp.profilers.cupti import CuptiProfiler

    d = out / f"cupti_{m}x{n}"
    d.mkdir(parents=True, exist_ok=True)
    cmd = CuptiProfiler().wrap(f"{sys.executable} {__file__} --child launch {m} {n}", d)
    subprocess.run(["bash", "-c", cmd], check=True, capture_output=True, timeout=600)
    trace = CuptiProfiler().parse(d)
    k = next(k for k in trace.kernels if "softmax" in k.name)
    return k.avg_us


def wall(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=EXAMPLE, env={**os.environ, **env}, check=True, capture_output=True, timeout=900)
    return time.perf_counter() - t0


def main(out: Path, quick: bool = False) -> int:
    """`quick`: CUDA events and the CUPTI trace only (no ncu), for a short device call. Scratch
    files go to a temporary folder; only profiler_accuracy.md is written to `out`, after each row."""
    import tempfile

    from kopt_mcp.profilers.ncu import NcuProfiler

    out.mkdir(parents=True, exist_ok=True)
    report, out = out / "profiler_accuracy.md", Path(tempfile.mkdtemp(prefix="kopt-acc-"))
    lines = ["# Profiler GPU time vs CUDA events; profiling overhead", "",
             "| config class (fp16) | events, batch of 50 (us) | events, single queued launch (us) | CUPTI trace mean "
             "(us) | vs batch | vs single | ncu cache-control all (us) | vs single | ncu cache-control none (us) | vs single |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for m, n in CLASSES:
        r = subprocess.run([sys.executable, __file__, "--child", "events", str(m), str(n)], check=True,
                           capture_output=True, text=True, timeout=600)
        ev = float(next(ln for ln in r.stdout.splitlines() if ln.startswith("EVENTS_US")).split()[1])
        one = float(next(ln for ln in r.stdout.splitlines() if ln.startswith("SINGLE_US")).split()[1])
        cu = cupti_mean(m, n, out)
        nan = float("nan")
        all_, none_ = (nan, nan) if quick else (ncu_median(m, n, out, "all"), ncu_median(m, n, out, "none"))

        def pct(a: float, b: float) -> str:
            return f"{(a - b) / b * 100:+.2f}%"

        lines.append(f"| M={m},N={n} | {ev:.2f} | {one:.2f} | {cu:.2f} | {pct(cu, ev)} | {pct(cu, one)} | "
                     f"{all_:.2f} | {pct(all_, one)} | {none_:.2f} | {pct(none_, one)} |")
        report.write_text("\n".join(lines) + "\n")
    (out / "t").mkdir(exist_ok=True)
    (out / "d").mkdir(exist_ok=True)
    bench = ["bash", "-c", f"{sys.executable} bench.py"]
    from kopt_mcp.profilers.cupti import CuptiProfiler

    (out / "c").mkdir(exist_ok=True)
    plain = [wall(bench, {"KOPT_PROFILE": "1"}) for _ in range(3)]
    trace = [wall(["bash", "-c", CuptiProfiler().wrap(f"{sys.executable} bench.py", out / "c")],
                  {"KOPT_PROFILE": "1"}) for _ in range(3)]
    timing = [] if quick else [
        wall(["bash", "-c", NcuProfiler(detail=False).wrap(f"{sys.executable} bench.py", out / "t")],
             {"KOPT_PROFILE": "1"}) for _ in range(2)]
    detail = [] if quick else [
        wall(["bash", "-c", NcuProfiler(detail=True).wrap(f"{sys.executable} bench.py", out / "d")],
             {"KOPT_PROFILE": "1"}) for _ in range(2)]
    p = statistics.median(plain)
    lines += ["", "| run of the example's bench.py with KOPT_PROFILE=1 | wall s (median) | vs plain |",
              "|---|---|---|", f"| plain | {p:.2f} | 1.00x |",
              f"| CUPTI kernel trace (NVIDIA keep metric) | {statistics.median(trace):.2f} | {statistics.median(trace) / p:.2f}x |",
              *([] if quick else [f"| ncu timing metrics | {statistics.median(timing):.2f} | {statistics.median(timing) / p:.2f}x |",
              f"| ncu detail metrics (trace report) | {statistics.median(detail):.2f} | {statistics.median(detail) / p:.2f}x |"])]
    text = "\n".join(lines) + "\n"
    report.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(main(Path(sys.argv[1]), quick="--quick" in sys.argv[2:]))
