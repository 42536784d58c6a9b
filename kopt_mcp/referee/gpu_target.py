"""Which kernels' GPU time decides every verdict, said at the baseline (`BenchmarkResult.gpu_target`),
and, where `[profiler] kernel` is empty so that the trace's hottest kernel decides, which of the
trace's kernels the repository's own sources define (kopt_mcp/bench/kernel_sources.py), with the regex
that would judge them. On an H200 (2026-12-04) init's proposal for Liger-Kernel's
FusedLinearCrossEntropy left the kernel empty (no traced run fitted its budget): torch's elementwise
add (27.0% of the trace) then judged, while Liger's own Triton kernels (1.7%) were below the top ten
rows of kernel_trace_analysis. Reads the repository's files (`defined_kernels`); decides nothing.
"""

from __future__ import annotations

from pathlib import Path

from kopt_mcp.bench.kernel_sources import defined_kernels, own_kernels
from kopt_mcp.evidence.names import short_kernel_name
from kopt_mcp.evidence.trace import KernelTrace, exact_names_regex
from kopt_mcp.results import GpuTarget, OwnKernel


def own_of(trace: KernelTrace | None, root: Path) -> tuple[list[OwnKernel], str | None]:
    """The kernels of `trace` (hottest first, at most MAX_TARGETS) whose function the sources under
    `root` define, with their share of the trace's GPU time (%), and their anchored regex for
    [profiler] kernel; ([], None) without a trace or where none is defined there."""
    stats = own_kernels(trace.kernels, defined_kernels(root)) if trace is not None else []
    own = [OwnKernel(name=short_kernel_name(k.name), share_pct=round(k.share_pct, 2)) for k in stats]
    return own, exact_names_regex([k.name for k in stats])


def gpu_target(regex: str, kernels: list[str], trace: KernelTrace | None, root: Path) -> GpuTarget | None:
    """The session's judged `kernels` (full names, from the baseline's first profile) and how they were
    chosen: by `regex` ([profiler] kernel) where it is set, else "hottest", then with the repository's
    own kernels of `trace` (sources under `root`, `own_of`). None without kernels."""
    if not kernels:
        return None
    if regex:
        return GpuTarget(kernels=kernels, by="regex")
    own, own_regex = own_of(trace, root)
    return GpuTarget(kernels=kernels, by="hottest", own=own, own_regex=own_regex)


def hottest_note(target: GpuTarget | None, trace: KernelTrace | None) -> str:
    """The baseline reason's clause where the hottest kernel judges (target.by "hottest"): which kernel,
    its share, and the repository's own kernels with the regex to judge them, or that it defines none
    of the trace's kernels. "" otherwise."""
    if target is None or target.by != "hottest":
        return ""
    share = next((k.share_pct for k in trace.kernels if k.name == target.kernels[0]), None) if trace else None
    said = f" ({share:.1f}% of its GPU time)" if share is not None else ""
    text = (f"[profiler] kernel is empty: GPU time is judged on the trace's hottest kernel, "
            f"{short_kernel_name(target.kernels[0])[:80]}{said}; ")
    if target.own:
        names = ", ".join(f"{o.name} ({o.share_pct:.1f}%)" for o in target.own)
        return text + (f"the trace's kernels this repository defines: {names}: to judge them, set [profiler] kernel = "
                       f"{target.own_regex!r} (gpu_target.own_regex) and start a new session")
    return text + ("no kernel of the trace is defined in this repository's sources: to judge the ones you edit, set "
                   "[profiler] kernel (the tool kernel_trace_analysis lists the trace's kernels) and start a new session")
