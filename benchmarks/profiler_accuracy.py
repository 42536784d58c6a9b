"""Profiler GPU time vs CUDA events for the same kernel, and the wall-time cost of profiling.

Needs an NVIDIA GPU, torch, triton and ncu. Usage:
    python benchmarks/profiler_accuracy.py OUT_DIR
Writes OUT_DIR/profiler_accuracy.md. Parts:
1. Accuracy: the Triton example's baseline softmax kernel on each config class; CUDA-event time per
   launch (events around 50 back-to-back launches, median of 20 batches, after warm-up) vs Nsight Compute gpu__time_duration.sum of 30
   launches of the same kernel (median), with `--clock-control none` and ncu's default cache
   control (`all`: caches flushed before each profiled launch) and with `--cache-control none`.
2. Overhead: wall time of the example's benchmark in profile mode (KOPT_PROFILE=1) plain, under
   ncu timing metrics (the keep metric) and under ncu detail metrics (the trace report).
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


def wall(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=EXAMPLE, env={**os.environ, **env}, check=True, capture_output=True, timeout=900)
    return time.perf_counter() - t0


def main(out: Path) -> int:
    from kopt_mcp.profilers.ncu import NcuProfiler

    out.mkdir(parents=True, exist_ok=True)
    lines = ["# Profiler GPU time vs CUDA events; profiling overhead", "",
             "| config class (fp16) | CUDA events median (us) | ncu median, cache-control all (us) | diff | "
             "ncu median, cache-control none (us) | diff |", "|---|---|---|---|---|---|"]
    for m, n in CLASSES:
        r = subprocess.run([sys.executable, __file__, "--child", "events", str(m), str(n)], check=True,
                           capture_output=True, text=True, timeout=600)
        ev = float(next(ln for ln in r.stdout.splitlines() if ln.startswith("EVENTS_US")).split()[1])
        all_, none_ = ncu_median(m, n, out, "all"), ncu_median(m, n, out, "none")
        lines.append(f"| M={m},N={n} | {ev:.2f} | {all_:.2f} | {(all_ - ev) / ev * 100:+.2f}% | "
                     f"{none_:.2f} | {(none_ - ev) / ev * 100:+.2f}% |")
    (out / "t").mkdir(exist_ok=True)
    (out / "d").mkdir(exist_ok=True)
    bench = ["bash", "-c", f"{sys.executable} bench.py"]
    plain = [wall(bench, {"KOPT_PROFILE": "1"}) for _ in range(3)]
    timing = [wall(["bash", "-c", NcuProfiler(detail=False).wrap(f"{sys.executable} bench.py", out / "t")],
                   {"KOPT_PROFILE": "1"}) for _ in range(2)]
    detail = [wall(["bash", "-c", NcuProfiler(detail=True).wrap(f"{sys.executable} bench.py", out / "d")],
                   {"KOPT_PROFILE": "1"}) for _ in range(2)]
    p = statistics.median(plain)
    lines += ["", "| run of the example's bench.py with KOPT_PROFILE=1 | wall s (median) | vs plain |",
              "|---|---|---|", f"| plain | {p:.2f} | 1.00x |",
              f"| ncu timing metrics (keep metric) | {statistics.median(timing):.2f} | {statistics.median(timing) / p:.2f}x |",
              f"| ncu detail metrics (trace report) | {statistics.median(detail):.2f} | {statistics.median(detail) / p:.2f}x |"]
    text = "\n".join(lines) + "\n"
    (out / "profiler_accuracy.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        sys.exit(main(Path(sys.argv[1])))
