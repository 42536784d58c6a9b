"""Profiler GPU time vs CUDA events for the same kernel, and the wall-time cost of profiling.

Needs an NVIDIA GPU, torch, triton, ncu and cupti-python. Usage:
    python benchmarks/profiler_accuracy/run.py OUT_DIR [--quick]
    python benchmarks/profiler_accuracy/run.py OUT_DIR --perturbation K   (see `perturbation`)
Writes OUT_DIR/profiler_accuracy.md, rewritten after each config class (scratch files go to a
temporary folder). `--quick`: no ncu (CUDA events and the CUPTI trace only).

The kernel: the Triton example's baseline softmax, on each config class (fp16). The `events` child
launches it 10 times (warm-up), then 20 batches of 50 back-to-back launches with a CUDA event pair
around each batch (EVENTS_US: median over batches of batch time / 50), then 40 single launches each
queued behind torch.cuda._sleep with an event pair around it, so neither the host's launch latency
nor an inter-launch gap is timed (SINGLE_US: median of the 40): 1050 launches in all.

Table 1, like for like: the `events` child runs UNDER the CUPTI trace (CuptiProfiler.wrap), so
the CUPTI per-launch GPU times are of the very launches the events timed (launch order: 10 warm-up,
1000 in batches, 40 single). Columns:
- events batch / events single: EVENTS_US / SINGLE_US of that traced run (us);
- (a) CUPTI batch: median over the 20 batches of (sum of the batch's 50 CUPTI durations) / 50, vs
  events batch (it lacks the idle gaps between launches that the events count);
- (b) CUPTI single: median of the 40 single launches' CUPTI durations, vs events single;
- (c) CUPTI median: median of all 1050 launches' durations, vs events batch;
- (d) CUPTI mean: mean of all 1050 launches, warm-up included (what the keep metric sums), vs
  events batch.
Each "vs" column is (CUPTI - events) / events in %.
Table 2, does tracing perturb the kernel: an untraced `events` child per class; events untraced vs
events traced (traced - untraced) / untraced in %, batch and single.
Table 3 (not with --quick), Nsight Compute gpu__time_duration.sum: median of 30 launches (after 10
skipped) with `--clock-control none`, `--cache-control all` (ncu's default) and `none`, each vs the
untraced events single median.
Table 4, overhead: wall time of the example's bench.py in profile mode (KOPT_PROFILE=1) plain, under
the CUPTI trace (the NVIDIA keep metric), ncu timing metrics, ncu detail metrics, and the merged
"cupti+ncu" trace report (CUPTI run then ncu detail run); the ncu rows not with --quick.
"""

from __future__ import annotations

import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # this checkout's kopt_mcp, also when an older copy is installed
    sys.path.insert(0, str(ROOT))
EXAMPLE = ROOT / "examples" / "triton_softmax"
CLASSES = [(302592, 197), (4096, 16384), (2048, 32000)]
WARMUP, BATCHES, BATCH, SINGLES = 10, 20, 50, 40
LAUNCHES = WARMUP + BATCHES * BATCH + SINGLES  # 1050 softmax launches in one `events` child
NAN = float("nan")


# -- arithmetic on recorded per-launch durations (no GPU; unit-tested in tests/test_profiler_accuracy.py) --

def split_launches(durations_us: list[float]) -> tuple[list[float], list[list[float]], list[float]]:
    """The `events` child's launches in launch order (LAUNCHES durations, us) split into the
    warm-up (WARMUP), the batches (BATCHES lists of BATCH) and the single launches (SINGLES).
    Raises ValueError naming both counts if there are not exactly LAUNCHES durations."""
    if len(durations_us) != LAUNCHES:
        raise ValueError(f"expected {LAUNCHES} softmax launches ({WARMUP} warm-up + {BATCHES}x{BATCH} + "
                         f"{SINGLES} single) in the CUPTI trace, got {len(durations_us)}")
    warm, rest = durations_us[:WARMUP], durations_us[WARMUP:]
    batches = [rest[i * BATCH:(i + 1) * BATCH] for i in range(BATCHES)]
    return warm, batches, rest[BATCHES * BATCH:]


def median_batch_mean(batches: list[list[float]]) -> float:
    """Median over batches of (sum of a batch's durations) / (its length), in the durations' unit
    (us). Raises ValueError on no batch or an empty batch."""
    if not batches or any(not b for b in batches):
        raise ValueError("median_batch_mean needs at least one non-empty batch")
    return statistics.median(sum(b) / len(b) for b in batches)


def pct_diff(value: float, reference: float) -> float:
    """(value - reference) / reference in %; NaN when either is NaN or reference is 0."""
    if reference == 0 or value != value or reference != reference:
        return NAN
    return (value - reference) / reference * 100.0


def cupti_figures(durations_us: list[float]) -> dict[str, float]:
    """From one `events` child's softmax durations (us, launch order, LAUNCHES of them): "batch"
    (a, median batch mean), "single" (b, median of the single launches), "median" (c, median of
    all launches), "mean" (d, mean of all launches incl. warm-up). Raises ValueError (see
    split_launches)."""
    _, batches, singles = split_launches(durations_us)
    return {"batch": median_batch_mean(batches), "single": statistics.median(singles),
            "median": statistics.median(durations_us), "mean": statistics.fmean(durations_us)}


def fmt_pct(value: float, reference: float) -> str:
    """pct_diff as a table cell: "+1.23%", or "-" where it is NaN."""
    d = pct_diff(value, reference)
    return "-" if d != d else f"{d:+.2f}%"


def fmt_us(value: float) -> str:
    """A time (us) as a table cell: "12.34", or "-" for NaN."""
    return "-" if value != value else f"{value:.2f}"


# -- the measured child process -----------------------------------------------------------

def child(mode: str, m: int, n: int) -> None:
    """Runs inside the measured process: `events` prints EVENTS_US and SINGLE_US (medians, us);
    `launch` launches WARMUP + 30 times (for ncu, which skips the warm-up)."""
    import torch

    sys.path.insert(0, str(EXAMPLE))
    from kernel import softmax

    x = torch.randn(m, n, device="cuda", dtype=torch.float16)
    for _ in range(WARMUP):
        softmax(x)
    torch.cuda.synchronize()
    if mode != "events":
        for _ in range(30):
            softmax(x)
        torch.cuda.synchronize()
        return
    # events around BATCH back-to-back launches, so the GPU never waits for the host's launch
    times = []
    for _ in range(BATCHES):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(BATCH):
            softmax(x)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / BATCH)
    print(f"EVENTS_US {statistics.median(times):.4f}")
    single = []
    for _ in range(SINGLES):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(2_000_000)  # keeps the stream busy while the host enqueues a, kernel, b
        a.record()
        softmax(x)
        b.record()
        b.synchronize()
        single.append(a.elapsed_time(b) * 1000.0)
    print(f"SINGLE_US {statistics.median(single):.4f}")


def _child_cmd(mode: str, m: int, n: int) -> str:
    return f"{shlex.quote(sys.executable)} {shlex.quote(__file__)} --child {mode} {m} {n}"


def _events(stdout: str) -> tuple[float, float]:
    """EVENTS_US and SINGLE_US from the `events` child's stdout."""
    found = {ln.split()[0]: float(ln.split()[1]) for ln in stdout.splitlines()
             if ln.startswith(("EVENTS_US ", "SINGLE_US "))}
    return found["EVENTS_US"], found["SINGLE_US"]


def events_untraced(m: int, n: int) -> tuple[float, float]:
    """(batch, single) CUDA-event medians (us) of an `events` child with no profiler."""
    r = subprocess.run(["bash", "-c", _child_cmd("events", m, n)], check=True, capture_output=True, text=True,
                       timeout=600)
    return _events(r.stdout)


def events_traced(m: int, n: int, scratch: Path) -> tuple[float, float, list[float]]:
    """(batch, single) CUDA-event medians (us) of an `events` child run under the CUPTI trace, and
    the trace's per-launch durations (us, launch order) of its softmax kernel."""
    from kopt_mcp.profilers.cupti import CuptiProfiler

    d = scratch / f"cupti_events_{m}x{n}"
    d.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["bash", "-c", CuptiProfiler().wrap(_child_cmd("events", m, n), d)], check=True,
                       capture_output=True, text=True, timeout=600)
    batch, single = _events(r.stdout)
    hits = [k for k in CuptiProfiler().parse(d).kernels if "softmax" in k.name]
    if len(hits) != 1 or hits[0].durations_us is None:
        raise RuntimeError(f"{d}: expected one softmax kernel with per-launch times, got "
                           f"{[(k.name, k.calls, k.durations_us is not None) for k in hits]}")
    return batch, single, hits[0].durations_us


def ncu_median(m: int, n: int, scratch: Path, cache: str) -> float:
    """Median gpu__time_duration.sum (us) of 30 softmax launches under ncu with `--cache-control cache`."""
    from kopt_mcp.profilers.ncu import parse_ncu_csv

    csv = scratch / f"ncu_{m}x{n}_{cache}.csv"
    cmd = ["ncu", "--clock-control", "none", "--cache-control", cache, "--csv", "--page", "raw", "--metrics",
           "gpu__time_duration.sum", "-k", "regex:softmax", "--launch-skip", str(WARMUP), "--log-file", str(csv),
           sys.executable, __file__, "--child", "launch", str(m), str(n)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    (k,) = parse_ncu_csv(csv).kernels
    return statistics.median(k.durations_us)


def wall(cmd: str, cwd: Path) -> float:
    """Wall seconds of one `bash -c cmd` run in `cwd` with KOPT_PROFILE=1 (raises if it fails)."""
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", cmd], cwd=cwd, env={**os.environ, "KOPT_PROFILE": "1"}, check=True,
                   capture_output=True, timeout=900)
    return time.perf_counter() - t0


# -- the report ---------------------------------------------------------------------------

HEAD = ["# Profiler GPU time vs CUDA events; profiling overhead", "",
        "Columns: see the docstring of benchmarks/profiler_accuracy/run.py. Times in us per launch.", ""]
T1 = ["## 1. CUPTI vs CUDA events, the same launches (events child run under the CUPTI trace)", "",
      "| config class (fp16) | events batch | events single | (a) CUPTI batch | vs events batch | (b) CUPTI single "
      "| vs events single | (c) CUPTI median, all | vs events batch | (d) CUPTI mean, all incl. warm-up "
      "| vs events batch |", "|---|---|---|---|---|---|---|---|---|---|---|"]
T2 = ["## 2. Does the CUPTI trace perturb the kernel? Events untraced vs traced", "",
      "| config class (fp16) | batch untraced | batch traced | traced vs untraced | single untraced | single traced "
      "| traced vs untraced |", "|---|---|---|---|---|---|---|"]
T3 = ["## 3. Nsight Compute gpu__time_duration.sum, median of 30 launches, vs untraced events single", "",
      "| config class (fp16) | events single untraced | ncu cache-control all | vs events | ncu cache-control none "
      "| vs events |", "|---|---|---|---|---|---|"]


def class_rows(label: str, untraced: tuple[float, float], traced: tuple[float, float], cu: dict[str, float],
               ncu: tuple[float, float]) -> tuple[str, str, str]:
    """One config class's rows of tables 1-3 from its measured numbers (us; NaN for not measured)."""
    (ub, us), (tb, ts), (na, nn) = untraced, traced, ncu
    r1 = (f"| {label} | {fmt_us(tb)} | {fmt_us(ts)} | {fmt_us(cu['batch'])} | {fmt_pct(cu['batch'], tb)} | "
          f"{fmt_us(cu['single'])} | {fmt_pct(cu['single'], ts)} | {fmt_us(cu['median'])} | "
          f"{fmt_pct(cu['median'], tb)} | {fmt_us(cu['mean'])} | {fmt_pct(cu['mean'], tb)} |")
    r2 = (f"| {label} | {fmt_us(ub)} | {fmt_us(tb)} | {fmt_pct(tb, ub)} | {fmt_us(us)} | {fmt_us(ts)} | "
          f"{fmt_pct(ts, us)} |")
    r3 = f"| {label} | {fmt_us(us)} | {fmt_us(na)} | {fmt_pct(na, us)} | {fmt_us(nn)} | {fmt_pct(nn, us)} |"
    return r1, r2, r3


def overhead_rows(walls: dict[str, list[float]]) -> list[str]:
    """Table 4 from wall seconds per run kind (the first key is the plain run)."""
    rows = ["## 4. Overhead", "", "| run of the example's bench.py with KOPT_PROFILE=1 | wall s (median) | vs plain |",
            "|---|---|---|"]
    plain = statistics.median(next(iter(walls.values())))
    for label, times in walls.items():
        med = statistics.median(times)
        rows.append(f"| {label} | {med:.2f} | {med / plain:.2f}x |")
    return rows


def main(out: Path, quick: bool = False) -> int:
    """Measure every class and write `out`/profiler_accuracy.md after each step; 0 when done."""
    from kopt_mcp.profilers import CuptiProfiler, NcuProfiler, TraceWithMetrics

    out.mkdir(parents=True, exist_ok=True)
    report, scratch = out / "profiler_accuracy.md", Path(tempfile.mkdtemp(prefix="kopt-acc-"))
    rows: tuple[list[str], list[str], list[str]] = ([], [], [])

    def write(tail: list[str] | None = None) -> str:
        tables = [*HEAD, *T1, *rows[0], "", *T2, *rows[1], ""]
        if not quick:
            tables += [*T3, *rows[2], ""]
        text = "\n".join([*tables, *(tail or [])]) + "\n"
        report.write_text(text)
        return text

    for m, n in CLASSES:
        untraced = events_untraced(m, n)
        tb, ts, durations = events_traced(m, n, scratch)
        ncu = (NAN, NAN) if quick else (ncu_median(m, n, scratch, "all"), ncu_median(m, n, scratch, "none"))
        for table, row in zip(rows, class_rows(f"M={m},N={n}", untraced, (tb, ts), cupti_figures(durations), ncu)):
            table.append(row)
        write()
    bench_dir = scratch / "bench"
    shutil.copytree(EXAMPLE, bench_dir, ignore=shutil.ignore_patterns("candidates", "results", "__pycache__"))
    bench = f"{shlex.quote(sys.executable)} bench.py"
    kinds = {"plain": lambda cmd, _d: cmd, "CUPTI kernel trace (NVIDIA keep metric)": CuptiProfiler().wrap}
    if not quick:
        kinds |= {"ncu timing metrics": NcuProfiler(detail=False).wrap,
                  "ncu detail metrics": NcuProfiler(detail=True).wrap,
                  "cupti+ncu merged trace report (kernel_trace_analysis)":
                      TraceWithMetrics(CuptiProfiler(), NcuProfiler(detail=True)).wrap}
    walls: dict[str, list[float]] = {}
    for i, (label, wrap) in enumerate(kinds.items()):
        runs = 3 if i < 2 else 2
        walls[label] = []
        for r in range(runs):
            d = scratch / f"overhead_{i}_{r}"
            d.mkdir()
            walls[label].append(wall(wrap(bench, d), bench_dir))
        text = write(overhead_rows(walls))
    print(text)
    return 0


def perturbation(out: Path, repeats: int) -> int:
    """Is the kernel slower under the CUPTI trace, or is a process simply placed differently? Per
    class, `repeats` pairs of `events` children, untraced then traced, alternating (each a fresh
    process). Writes `out`/cupti_perturbation.md: the single-launch event medians (us) of every
    process and the traced/untraced ratio of the medians; 0 when done."""

    out.mkdir(parents=True, exist_ok=True)
    report, scratch = out / "cupti_perturbation.md", Path(tempfile.mkdtemp(prefix="kopt-pert-"))
    lines = ["# CUDA events of the same kernel, untraced vs under the CUPTI trace, alternating processes", "",
             f"Single queued launch, median of 40 per process; {repeats} processes each way.", "",
             "| config class (fp16) | untraced, per process (us) | traced, per process (us) | traced vs untraced "
             "(medians) |", "|---|---|---|---|"]
    for m, n in CLASSES:
        plain, traced = [], []
        for r in range(repeats):
            plain.append(events_untraced(m, n)[1])
            d = scratch / f"r{r}"
            traced.append(events_traced(m, n, d)[1])
        lines.append(f"| M={m},N={n} | {', '.join(f'{v:.2f}' for v in plain)} | "
                     f"{', '.join(f'{v:.2f}' for v in traced)} | "
                     f"{fmt_pct(statistics.median(traced), statistics.median(plain))} |")
        report.write_text("\n".join(lines) + "\n")
    print(report.read_text())
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif "--perturbation" in sys.argv:
        sys.exit(perturbation(Path(sys.argv[1]), int(sys.argv[sys.argv.index("--perturbation") + 1])))
    else:
        sys.exit(main(Path(sys.argv[1]), quick="--quick" in sys.argv[2:]))
