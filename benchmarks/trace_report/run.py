"""The trace report of the Triton example's baseline, as the agent gets it from kernel_trace_analysis.

Needs an NVIDIA GPU with torch and triton (ncu and cupti-python for the full "cupti+ncu" report;
with one of them, that one alone). Usage:
    python benchmarks/trace_report/run.py OUT_DIR [--keep]
Copies examples/triton_softmax into a fresh git repository (in a temporary folder; `--keep` leaves
it there, with the session's ledger and run logs), opens a Referee on it with the default GPU probe
(NVML), calls run_benchmark (records the baseline) and kernel_trace_analysis(top=5), and writes:
- OUT_DIR/trace_report.json: {"trace": TraceResult, "baseline": BenchmarkResult} (model_dump);
- OUT_DIR/trace_report.md: per kernel short name, calls, total / average / median GPU time (us),
  share (%), registers per thread, shared memory per block (bytes), SM and DRAM throughput (% of
  peak) and achieved occupancy (%) where measured; the target kernel(s), the bottleneck class with
  its reason, the profiler's notes, and the baseline's per-class script metric (us_per_call).
Exits 2 with a message when there is no GPU to run on.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # this checkout's kopt_mcp, also when an older copy is installed
    sys.path.insert(0, str(ROOT))

from kopt_mcp.results import BenchmarkResult, TraceResult  # noqa: E402

NO_GPU = ("trace_report.py needs an NVIDIA GPU with torch and triton (none found here): run it on the GPU "
          "machine, e.g. `scripts/gpu_suite.sh trace`")
_EXTRA_COLUMNS = (("SM throughput %", "sm_throughput_pct"), ("DRAM throughput %", "dram_throughput_pct"),
                  ("achieved occupancy %", "achieved_occupancy_pct"))


def _cell(value: float | int | None, digits: int = 2) -> str:
    """A number as a table cell ("-" for None)."""
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.{digits}f}"


def render_markdown(trace: TraceResult, base: BenchmarkResult, title: str = "examples/triton_softmax baseline") -> str:
    """The report as markdown: device and backend, one row per kernel of `trace` (times in us,
    share and throughputs in %, shared memory in bytes), target kernel(s), bottleneck, notes, and
    `base`'s per-class metric. Never raises on missing fields (they show as "-")."""
    lines = [f"# Trace report: {title}", "",
             f"Device: {trace.device.name} ({trace.device.vendor}); profiler backend: {trace.backend}.", ""]
    if not trace.available:
        lines += ["No profiler on this device: " + "; ".join(trace.notes), ""]
    head = ["kernel", "calls", "total us", "avg us", "median us", "share %", "registers/thread",
            "shared mem bytes", *(label for label, _ in _EXTRA_COLUMNS)]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for k in trace.kernels:
        cells = [k.short_name.replace("|", "/"), str(k.calls), _cell(k.total_us), _cell(k.avg_us), _cell(k.median_us),
                 _cell(k.share_pct, 1), _cell(k.registers_per_thread), _cell(k.shared_mem_per_block_bytes),
                 *(_cell(k.extra.get(key), 1) for _, key in _EXTRA_COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    target = ", ".join(trace.target_kernels) or "none"
    lines += ["", f"Target kernel(s): {target}; target GPU time {_cell(trace.target_gpu_us)} us of "
              f"{_cell(trace.total_gpu_us)} us in all."]
    b = trace.bottleneck
    lines += ["", f"Bottleneck: **{b.kind}**: {b.reason}" if b else "Bottleneck: not classified (no target kernel)."]
    if trace.notes and trace.available:
        lines += ["", "Notes:", *(f"- {n}" for n in trace.notes)]
    lines += ["", f"## Baseline script metric ({base.metric}, per config class)", "",
              f"| config class | {base.metric} | correct |", "|---|---|---|"]
    lines += [f"| {c.key} | {c.metric:.4g} | {'yes' if c.correct else 'NO'} |" for c in base.classes]
    return "\n".join(lines) + "\n"


def write_report(out: Path, trace: TraceResult, base: BenchmarkResult) -> tuple[Path, Path]:
    """Write trace_report.json and trace_report.md into `out` (created); their paths."""
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "trace_report.json", out / "trace_report.md"
    js.write_text(json.dumps({"trace": trace.model_dump(mode="json"), "baseline": base.model_dump(mode="json")},
                             indent=1) + "\n")
    md.write_text(render_markdown(trace, base))
    return js, md


def main(out: Path, keep: bool = False) -> int:
    """Run the baseline and the trace on a GPU and write the report; 0 when written, 2 without a GPU."""
    from kopt_mcp.commands.demo import gpu_example_possible, prepare_repo
    from kopt_mcp.paths import examples_dir
    from kopt_mcp.referee import Referee

    if not gpu_example_possible():
        print(NO_GPU, file=sys.stderr)
        return 2
    scratch = Path(tempfile.mkdtemp(prefix="kopt-trace-"))
    repo = prepare_repo(examples_dir() / "triton_softmax", scratch / "triton_softmax")
    ref = Referee(repo, tag="trace-report")
    try:
        base = ref.run_benchmark()
        trace = ref.kernel_trace_analysis(top=5)
    finally:
        ref.close()
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    js, md = write_report(out, trace, base)
    print(md.read_text())
    print(f"written: {js}, {md}" + (f"; session kept in {repo}" if keep else ""))
    return 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--keep"]
    if len(args) != 1:
        print("usage: python benchmarks/trace_report/run.py OUT_DIR [--keep]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(args[0]), keep="--keep" in sys.argv[1:]))
