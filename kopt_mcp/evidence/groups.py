"""Launch groups (pure): the launches of one kernel with one launch shape in one profiled run, built
from per-launch records, split into the harness's visits of a shape, and the target groups (the
kernels the `[profiler] kernel` regex matches, else the hottest non-utility kernel)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, Field

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.names import is_utility_kernel, short_kernel_name


def launch_median_us(durations_us: list[float] | None) -> float | None:
    """The median of per-launch GPU times (us; a list of any length, any order), or None for None
    or an empty list. Never raises. Every parser that fills KernelStat.durations_us fills
    KernelStat.median_us with this, so the two always agree."""
    return statistics.median(durations_us) if durations_us else None


class LaunchGroup(BaseModel):
    """The launches of one kernel with one launch shape in one profiled run (the keep metric's unit:
    `kopt_mcp/rules/keep.py`).

    `grid`: blocks per dimension (CUDA; AMD: workgroups, Grid_Size / Workgroup_Size); `block`:
    threads per block (AMD: work-items per workgroup); None where the backend does not record the
    shape (then a kernel is one group). `args`: argument shapes where the trace has them (CUPTI and
    rocprofv3 kernel traces do not: None). Times in us; `first_order`: the launch-order key (GPU
    start, ns) of the group's first launch, so groups can be put in the benchmark's order.
    """

    kernel: str
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    args: str | None = None
    registers_per_thread: int | None = None
    shared_mem_bytes: int | None = None
    calls: int
    total_us: float
    #: median per-launch GPU time (us) over the launches the trace kept (None: not recorded)
    median_us: float | None = None
    first_order: float | None = None
    #: per-launch GPU times (us) in launch order (CUPTI keeps at most 20000 per run of a group and process)
    durations_us: list[float] | None = Field(default=None, exclude=True)
    #: each launch's launch-order key (GPU start, ns), parallel to durations_us; for `split_runs`
    launch_starts: list[float] | None = Field(default=None, exclude=True)
    #: which run of this kernel and shape (0: the first): a shape whose launches come back after the
    #: kernel ran with other shapes is split into runs (`split_runs`), one per visit
    run: int = 0

    @property
    def shape(self) -> tuple:
        """(grid, block, args, run): the launch shape part of the group's key."""
        return (self.grid, self.block, self.args, self.run)

    def label(self) -> str:
        """A short display form, e.g. `rms_norm_fwd grid=(4096,1,1) block=(128,1,1)`."""
        parts = [short_kernel_name(self.kernel, 60)]
        if self.grid:
            parts.append("grid=({},{},{})".format(*self.grid))
        if self.block:
            parts.append("block=({},{},{})".format(*self.block))
        if self.args:
            parts.append(f"args={self.args}")
        if self.run:
            parts.append(f"run {self.run + 1}")
        return " ".join(parts)


#: a group with more runs than this is an interleaving (shapes taking turns launch by launch, e.g. a
#: step that launches the kernel with several shapes), not a harness visiting shapes one after another
MAX_RUNS = 16
#: a visit of one shape launches it repeatedly (warm-up, repetitions); runs shorter than this are a
#: step that launches several shapes once each (a fixed-count loop of a few steps), left whole
MIN_RUN_LAUNCHES = 3


def split_runs(groups: list[LaunchGroup], max_runs: int = MAX_RUNS) -> list[LaunchGroup]:
    """Split each launch group into its runs: maximal stretches of one kernel's launches (by GPU start)
    that keep one shape. A harness that visits shapes one after another (do_bench per config, a pytest
    parametrization) launches two configs with the same grid and block, e.g. 1024x1024 and 1024x65536
    rows at one program per row, as one (kernel, grid, block) group; their median launch is the one
    that happened to be launched most, and a candidate that gives one of them another block size
    could not be paired with it. Split, each visit is a group of its own (`run` 0, 1, ...), and
    pairing by key and then in launch order (rules/pairing.match_groups) lines the visits up.

    A group is split only when it has 2..`max_runs` runs of at least MIN_RUN_LAUNCHES launches each;
    more or shorter runs mean shapes taking turns within a step, left whole.
    Groups without per-launch starts are returned as they are. Input and output in first-launch
    order; `calls`/`total_us` of a split group count its kept launches. Never raises."""
    by_kernel: dict[str, list[tuple[float, int, float]]] = {}
    for i, g in enumerate(groups):
        if g.launch_starts is None or g.durations_us is None or len(g.launch_starts) != len(g.durations_us):
            continue
        by_kernel.setdefault(g.kernel, []).extend((t, i, d) for t, d in zip(g.launch_starts, g.durations_us))
    runs: dict[int, list[list[tuple[float, float]]]] = {}
    for launches in by_kernel.values():
        launches.sort()
        last = None
        for t, i, d in launches:
            if i != last:
                runs.setdefault(i, []).append([])
                last = i
            runs[i][-1].append((t, d))
    out: list[LaunchGroup] = []
    for i, g in enumerate(groups):
        parts = runs.get(i, [])
        if not 2 <= len(parts) <= max_runs or min(map(len, parts)) < MIN_RUN_LAUNCHES:
            out.append(g)
            continue
        for k, part in enumerate(parts):
            durs = [d for _, d in part]
            out.append(g.model_copy(update={
                "run": k, "calls": len(durs), "total_us": sum(durs), "median_us": launch_median_us(durs),
                "first_order": float(part[0][0]), "durations_us": durs, "launch_starts": [t for t, _ in part]}))
    out.sort(key=lambda x: (x.first_order is None, x.first_order or 0.0))
    return out


def build_groups(launches: list[tuple]) -> list[LaunchGroup]:
    """Launch groups from per-launch records `(kernel, grid, block, order, duration_us, registers,
    shared_mem_bytes)` (grid/block: 3-tuples of int or None; order: any sortable launch-order key,
    e.g. GPU start in ns; registers/shared memory: int or None, the largest is kept). Groups come
    back in the order of their first launch. Never raises for an empty list (returns [])."""
    acc: dict[tuple, dict] = {}
    for kernel, grid, block, order, dur, regs, smem in launches:
        g = acc.setdefault((kernel, grid, block), {"launches": [], "regs": None, "smem": None})
        g["launches"].append((order, dur))
        if regs is not None:
            g["regs"] = max(g["regs"] or 0, int(regs))
        if smem is not None:
            g["smem"] = max(g["smem"] or 0, int(smem))
    groups = []
    for (kernel, grid, block), g in acc.items():
        ordered = sorted(g["launches"])
        durs = [d for _, d in ordered]
        groups.append(LaunchGroup(kernel=kernel, grid=grid, block=block, registers_per_thread=g["regs"],
                                  shared_mem_bytes=g["smem"], calls=len(durs), total_us=sum(durs),
                                  median_us=launch_median_us(durs), first_order=float(ordered[0][0]),
                                  durations_us=durs, launch_starts=[float(o) for o, _ in ordered]))
    groups.sort(key=lambda x: x.first_order if x.first_order is not None else 0.0)
    return split_runs(groups)


def target_groups(groups: Sequence[LaunchGroup], kernel_regex: str | None) -> list[LaunchGroup]:
    """The target launch groups: every group whose kernel matches `kernel_regex` (re.search), else
    every group of the hottest kernel (by total GPU time over its groups) that is not a utility
    kernel. Raises ProfilerError (naming the kernels seen) when nothing matches or there is no kernel."""
    if not groups:
        raise ProfilerError("the profiled run launched no GPU kernel: is the benchmark running on the GPU?")
    if kernel_regex:
        pattern = re.compile(kernel_regex)
        hits = [g for g in groups if pattern.search(g.kernel)]
        if not hits:
            seen = ", ".join(dict.fromkeys(g.kernel[:60] for g in groups))
            raise ProfilerError(f"no kernel matches [profiler] kernel = {kernel_regex!r}; kernels seen: {seen[:400]}")
        return hits
    totals: dict[str, float] = {}
    for g in groups:
        totals[g.kernel] = totals.get(g.kernel, 0.0) + g.total_us
    ranked = sorted(totals, key=lambda k: -totals[k])
    hottest = next((k for k in ranked if not is_utility_kernel(k)), ranked[0])
    return [g for g in groups if g.kernel == hottest]
