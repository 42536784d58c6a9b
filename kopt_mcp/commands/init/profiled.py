"""The target kernels init proposes (`[profiler] kernel`), from a run under the machine's profiler:
under CUPTI, whose runs are script-metric runs, the benchmark run made under it (`script_profiler`,
`traced_targets`); else one separate profiled run (`kernel_regex`), started only where the budget
holds it (`profiled_targets`). The kernels the repository defines are chosen by
kopt_mcp/bench/kernel_sources.py. Also the machine's GPU count, and its GPUs' names and UUIDs for init's records."""

from __future__ import annotations

import tempfile
from pathlib import Path

from kopt_mcp.bench.runner import run_command
from kopt_mcp.bench.kernel_sources import choose_targets, defined_kernels
from kopt_mcp.commands.init.progress import Budget, Progress
from kopt_mcp.commands.init.runs import Run
from kopt_mcp.evidence.trace import exact_names_regex
from kopt_mcp.gpus import make_probe
from kopt_mcp.profilers import make_profiler
from kopt_mcp.profilers.base import profile_env


def kernel_regex(repo: Path, command: str, timeout_s: float = 1200.0, profiler=None,
                 topic: str | None = None) -> tuple[str | None, str]:
    """The target kernels' anchored regex from one run under `profiler` (default: the machine's
    `auto` profiler for its first GPU): the kernels of the trace that the repository defines, hottest
    first (kopt_mcp/bench/kernel_sources.py `choose_targets`; `topic`: init's --kernel), and why; or None and
    why not (no GPU, no profiler, a failed run, an empty trace)."""
    try:
        prof, why = _machine_profiler() if profiler is None else (profiler, "")
        if prof is None or prof.name == "none" or not prof.available():
            return None, why or "no profiler available"
        with tempfile.TemporaryDirectory(prefix="kopt-init-trace-") as tmp:
            r = run_command(prof.wrap(command, Path(tmp)), repo, profile_env(prof), timeout_s, Path(tmp) / "p.log")
            if r.timed_out:
                return None, f"the profiled run did not end within its limit ({timeout_s:.0f} s)"
            if r.exit_code != 0:
                return None, f"the profiled run exited {r.exit_code}"
            trace = prof.parse(Path(tmp))
        return _targets([k.name for k in trace.kernels], repo, topic, f"one {prof.name} trace")
    except Exception as e:  # a proposal, not a gate: say why and go on
        return None, f"profiling failed: {e}"


def _machine_profiler():
    """(the machine's `auto` profiler for its first GPU, '') or (None, "no GPU here"). Raises what the
    GPU probe raises."""
    gpus = make_probe("auto").read()
    return (make_profiler("auto", gpus[0].vendor), "") if gpus else (None, "no GPU here")


def _targets(names: list[str], repo: Path, topic: str | None, source: str) -> tuple[str | None, str]:
    """The anchored regex of the trace's kernels (`names`, hottest first) that the repository defines
    (`choose_targets`), and why, naming the trace (`source`)."""
    chosen, why = choose_targets(names, defined_kernels(repo), topic)
    return exact_names_regex(chosen), f"{why} ({source})"


def script_profiler(profile: bool, command: str | None):
    """The profiler init runs its last benchmark run under (runs.run_twice): the machine's `auto`
    profiler for its first GPU where it is available and its runs are script-metric runs
    (`measures_script`: CUPTI), else None (no command, `profile` off, no GPU, ncu, rocprof: those
    get the separate profiled run, `kernel_regex`)."""
    if not (profile and command):
        return None
    try:
        prof, _ = _machine_profiler()
    except Exception:  # the separate profiled run says why
        return None
    ok = prof is not None and getattr(prof, "measures_script", False) and prof.available()
    return prof if ok else None


def traced_targets(runs: list[Run], repo: Path, topic: str | None) -> tuple[str | None, str] | None:
    """The target kernel line from the benchmark run made under a profiler (`run_twice`): the trace's
    kernels the repository defines (`choose_targets`), or None where no run was profiled."""
    run = next((r for r in runs if r.profiler), None)
    if run is None:
        return None
    if run.kernels is None:
        return None, f"profiling failed: {run.profile_error}"
    return _targets(run.kernels, repo, topic, f"one {run.profiler} trace: benchmark run {runs.index(run) + 1}")


def gpu_count() -> int:
    """GPUs this machine's `auto` probe sees (0 where none, or where the probe fails)."""
    return len(gpu_ids())


def gpu_ids() -> list[tuple[str, str]]:
    """(name, UUID) of each GPU this machine's `auto` probe sees ([] where none, or where the probe fails)."""
    try:
        return [(g.name, g.uuid) for g in make_probe("auto").read()]
    except Exception:  # a count for the reasons of dropped tests and a record, never a reason to stop
        return []


#: a run under the profiler takes at most this many plain runs, where init plans one: it starts that
#: run only when the budget holds it. Measured on one H200 (2026-12-03, benchmarks/results/
#: 2026-12-03-h200-init-fresh-s13*/-s14*): fla LayerNorm 21.7 s plain, ~26 s under CUPTI (x1.2);
#: Liger FusedLinearCrossEntropy 201.6 s plain, cut by the budget after 215.0 s under CUPTI.
PROFILED_RUN_FACTOR = 1.25
_BY_HAND = ("kopt-mcp check-config, then, before the baseline, the tool kernel_trace_analysis on the GPU host "
            "(its own_regex: the repository's kernels of the trace)")


def profiled_targets(repo: Path, command: str, kernel: str | None, budget: Budget, progress: Progress,
                     expected_s: float, timeout_s: float, profiler=None) -> tuple[str | None, str]:
    """The target kernel line from one profiled run (`kernel_regex`; `profiler`: the machine's by
    default), within what is left of `budget`: started only where PROFILED_RUN_FACTOR x `expected_s`
    (one plain run, s) is left; skipped or cut by the budget, it is marked NOT CHECKED."""
    if not budget.can_start(expected_s * PROFILED_RUN_FACTOR):
        if not gpu_count():
            return None, "no GPU here"
        budget.not_checked("the target kernels (one profiled run)", _BY_HAND)
        return None, (f"not profiled: init's budget ran out ({budget.left():.0f} s left, a profiled run takes "
                      f"~{expected_s * PROFILED_RUN_FACTOR:.0f} s)")
    limit = budget.limit(timeout_s)
    with progress.step("one profiled run of the benchmark (the target kernels)"):
        found = kernel_regex(repo, command, limit, profiler, topic=kernel)
    if found[0] is None and limit < timeout_s and not budget.can_start():
        budget.not_checked("the target kernels (one profiled run, cut by the budget)", _BY_HAND)
        return None, f"the profiled run was cut by init's budget after {limit:.0f} s"
    return found
