"""One report from two profiled runs: GPU times from a timing profiler (the CUPTI kernel trace: no
replay, within ~1-3% of CUDA events) and hardware metrics from a metrics profiler (Nsight Compute
in detail mode, whose replayed gpu__time_duration differs from CUDA events by up to 6.7% on one
class: benchmarks/results/2026-11-22-h100-profiler-accuracy.md). The NVIDIA detail report.

`wrap` runs the benchmark twice, one after the other: under the timing profiler into
`out_dir/timing`, then, only if that run exited 0, under the metrics profiler into
`out_dir/metrics`. `parse` keeps every number of the timing trace and adds the metrics run's
`extra` to the kernel of the same name (see `match_kernel_names`).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.names import short_kernel_name
from kopt_mcp.evidence.trace import KernelStat, KernelTrace
from kopt_mcp.profilers.base import Profiler

__all__ = ["METRICS_DIR", "TIMING_DIR", "TraceWithMetrics", "match_kernel_names"]

TIMING_DIR = "timing"
METRICS_DIR = "metrics"
_FULL = 1 << 20  # short_kernel_name's max_chars for matching: never cut a name


class TraceWithMetrics:
    """The Profiler protocol over two profilers: `timing` for every time and count, `metrics` for
    `KernelStat.extra` (and registers / shared memory / launch geometry the timing trace lacks)."""

    def __init__(self, timing: Profiler, metrics: Profiler) -> None:
        self.timing, self.metrics = timing, metrics
        self.name = f"{timing.name}+{metrics.name}"
        self.per_launch = timing.per_launch

    def available(self) -> bool:
        """True where both profilers are available on this machine."""
        return self.timing.available() and self.metrics.available()

    def wrap(self, command: str, out_dir: Path) -> str:
        """One bash command: `command` under the timing profiler (writing `out_dir/timing`), then,
        only if it exited 0, under the metrics profiler (`out_dir/metrics`). Each runs in its own
        subshell (no exported variable of the first reaches the second). The whole exits with the
        failing run's code, non-zero if either fails, and its last stderr line names that run."""
        out = Path(out_dir)
        t_dir, m_dir = out / TIMING_DIR, out / METRICS_DIR
        steps = [f"mkdir -p {shlex.quote(str(t_dir))} {shlex.quote(str(m_dir))} || exit $?"]
        for what, prof, d, after in (
                ("timing", self.timing, t_dir, f"; the metrics run ({self.metrics.name}) was not started"),
                ("metrics", self.metrics, m_dir, f", after the timing run ({self.timing.name}) succeeded")):
            said = shlex.quote(f"kopt-mcp: the {what} run ({prof.name}) exited with code ")
            steps.append(f"( {prof.wrap(command, d)}\n) || {{ rc=$?; echo {said}\"$rc\"{shlex.quote(after)} >&2; "
                         "exit $rc; }")
        return "\n".join(steps)

    def parse(self, out_dir: Path) -> KernelTrace:
        """The timing trace of `out_dir/timing` with the metrics of `out_dir/metrics` merged in
        (times in us, hottest first, as the timing profiler ordered them). Raises ProfilerError
        naming the run (timing or metrics) whose output could not be read. Kernels that got no
        metrics keep their timing fields; one warning says how many and which."""
        out = Path(out_dir)
        try:
            timing = self.timing.parse(out / TIMING_DIR)
        except ProfilerError as e:
            raise ProfilerError(f"the timing run ({self.timing.name}, {out / TIMING_DIR}): {e}") from e
        try:
            metrics = self.metrics.parse(out / METRICS_DIR)
        except ProfilerError as e:
            raise ProfilerError(f"the metrics run ({self.metrics.name}, {out / METRICS_DIR}): {e} (the timing "
                                f"run ({self.timing.name}) was read; the report needs both)") from e
        return merge_traces(timing, metrics, self.name)


def merge_traces(timing: KernelTrace, metrics: KernelTrace, backend: str) -> KernelTrace:
    """`timing` with each matched kernel's `extra` from `metrics` added (over timing's own, if any),
    and registers / shared memory / block and grid size taken from `metrics` where `timing` has
    None. Calls, total/avg/median us, share %, per-launch times and the order stay `timing`'s.
    Warnings: timing's, then metrics' (prefixed), then one naming the kernels without metrics."""
    by_name = {k.name: k for k in metrics.kernels}
    pairs = match_kernel_names([k.name for k in timing.kernels], list(by_name))
    kernels: list[KernelStat] = []
    unmatched: list[str] = []
    for k in timing.kernels:
        m = by_name.get(pairs.get(k.name, ""))
        if m is None:
            unmatched.append(k.name)
            kernels.append(k)
            continue
        fill = {f: getattr(m, f) for f in ("registers_per_thread", "shared_mem_per_block_bytes", "block_size",
                                           "grid_size") if getattr(k, f) is None}
        kernels.append(k.model_copy(update={"extra": {**k.extra, **m.extra}, **fill}))
    warnings = list(timing.warnings) + [f"metrics run ({metrics.backend}): {w}" for w in metrics.warnings]
    if unmatched:
        shown = ", ".join(short_kernel_name(n, 60) for n in unmatched[:3])
        more = f" and {len(unmatched) - 3} more" if len(unmatched) > 3 else ""
        hint = (" (their names are not demangled: put binutils' c++filt on PATH)"
                if any(n.startswith("_Z") for n in unmatched) else "")
        warnings.append(f"{len(unmatched)} of {len(timing.kernels)} kernel(s) got no {metrics.backend} metrics "
                        f"(no kernel of the metrics run matched their name{hint}): {shown}{more}; their times "
                        f"are {timing.backend}'s, their throughput/occupancy metrics are missing")
    return KernelTrace(backend=backend, kernels=kernels, total_gpu_us=timing.total_gpu_us, warnings=warnings)


def match_kernel_names(timing: list[str], metrics: list[str]) -> dict[str, str]:
    """Pair each timing kernel name with at most one metrics kernel name (timing name -> metrics
    name), in three passes, each over the names the previous passes left unpaired:

    1. the exact name;
    2. equal `short_kernel_name` (return type, template arguments, parameters and anonymous
       namespaces dropped: c++filt's "{lambda()#1}" vs ncu's "[lambda() (instance 1)]");
    3. equal unqualified function name (the short name after its last "::"), since ncu names
       ATen kernels "at::reduce_kernel" where c++filt says "at::native::reduce_kernel".

    Passes 2 and 3 pair two names only when the key is unique among the unpaired names of BOTH
    runs, so two instantiations of one template are never guessed apart. Never raises.
    """
    pairs = {t: t for t in timing if t in set(metrics)}
    for key in (lambda n: short_kernel_name(n, _FULL), lambda n: short_kernel_name(n, _FULL).rsplit("::", 1)[-1]):
        taken = set(pairs.values())
        left_t = [t for t in timing if t not in pairs]
        left_m = [m for m in metrics if m not in taken]
        t_keys, m_keys = _group(left_t, key), _group(left_m, key)
        for k, ts in t_keys.items():
            ms = m_keys.get(k, [])
            if len(ts) == 1 and len(ms) == 1:
                pairs[ts[0]] = ms[0]
    return pairs


def _group(names: list[str], key) -> dict[str, list[str]]:
    """Names grouped by `key(name)`, in their order."""
    out: dict[str, list[str]] = {}
    for n in names:
        out.setdefault(key(n), []).append(n)
    return out
