"""What a profiler reports, and the protocol every profiler backend implements.

A backend never runs a process itself: it wraps the fixed benchmark command (`wrap`) and parses
what that wrapped run left behind (`parse`). The runner executes, so timeouts and process-tree
kills stay in one place.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

from kopt_mcp.errors import ProfilerError
from kopt_mcp.profilers.kernel_names import is_utility_kernel, short_kernel_name


class KernelStat(BaseModel):
    """One GPU kernel aggregated over all its launches in one profiled run.

    Units: times in us; `share_pct` in % of the run's total GPU kernel time; shared memory in bytes
    per block (static + dynamic). Fields a backend cannot know are None.
    """

    name: str
    calls: int
    total_us: float
    avg_us: float
    share_pct: float
    registers_per_thread: int | None = None
    shared_mem_per_block_bytes: int | None = None
    block_size: int | None = None
    grid_size: int | None = None
    extra: dict[str, float] = Field(default_factory=dict)
    #: per-launch GPU times (us) in launch order where the backend records them (CUPTI, ncu); used
    #: by the keep metric's paired per-launch test, never serialized into results or the ledger
    durations_us: list[float] | None = Field(default=None, exclude=True)
    #: a sort key per launch (GPU start in ns, or the profiler's launch index), parallel to durations_us
    launch_order: list[float] | None = Field(default=None, exclude=True)
    #: median per-launch GPU time (us) where the backend recorded each launch (CUPTI: the launches
    #: its trace kept, at most 20000 per kernel and process; ncu: every profiled launch); else None
    median_us: float | None = None


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


class HarnessUnit(BaseModel):
    """One measurement unit of the benchmark's own harness in one profiled run (a do_bench call, a
    torch.utils.benchmark Timer measurement, a pytest-benchmark case), in the harness's order
    (`index`, 0-based over the run's processes in the order they ran), with each kernel's GPU time
    per invocation of the timed function.

    `per_invocation[kernel][i]`: the GPU time (us) of kernel's launches in invocation i, summed;
    `launches[kernel][i]`: how many; invocations that launched no kernel are absent from both.
    `weights[i]`: statements in invocation i where the harness runs several per timed block
    (torch.utils.benchmark's `number`; absent: 1). `source`: "marked" (external correlation ids
    pushed around each invocation inside the process) or "segmented" (found in the launch stream
    afterwards: kopt_mcp/profilers/segment.py)."""

    index: int
    harness: str
    label: str = ""
    invocations: int = 0
    weights: dict[int, int] = Field(default_factory=dict)
    per_invocation: dict[str, dict[int, float]] = Field(default_factory=dict)
    launches: dict[str, dict[int, int]] = Field(default_factory=dict)
    source: str = "marked"

    def kernels(self) -> list[str]:
        """The kernel names launched inside this unit's invocations, in name order."""
        return sorted(self.per_invocation)


class LineStat(BaseModel):
    """One Python line of a sampled CPU run: `samples` whose innermost Python frame was this line
    (`pct`: % of all samples), in `function` of `file` (shown as in FunctionStat)."""

    file: str
    line: int
    function: str
    samples: int
    pct: float


class FunctionStat(BaseModel):
    """One Python function of a sampled CPU run (py-spy), over all the benchmark's processes and threads.

    `self_*`: samples whose innermost Python frame is this function (the time its own lines took,
    native calls they make included); `total_*`: samples with the function anywhere on the stack.
    Times in ms of thread time (samples x sampling interval), shares in % of all samples, and the
    sample counts behind them (`self_samples`, `total_samples`). `file` is relative to the
    benchmark's folder where the file is the repository's, else shortened to the package path
    (numpy/_core/_methods.py). `own`: the repository's own code outside the protected paths;
    `harness`: a protected file of the repository (the benchmark, the reference, the config: the
    agent may not change it). `line` is the function's hottest line; `lines` its hottest lines by
    self samples (at most LINES_PER_FUNCTION), each with its count."""

    function: str
    file: str
    line: int
    own: bool
    self_ms: float
    total_ms: float
    self_pct: float
    total_pct: float
    harness: bool = False
    self_samples: int = 0
    total_samples: int = 0
    lines: list[LineStat] = Field(default_factory=list)


class CpuProfile(BaseModel):
    """A sampled CPU run: the hottest functions first (by self time), how many samples at what rate,
    and where the samples' innermost Python frame was (% of all samples, with the counts behind
    them): the repository's own code outside the protected paths (`own`), libraries outside an
    import (`library`), the protected files of the repository and the libraries they call
    (`harness`: the benchmark, the reference), the import machinery (`import`), no Python frame at
    all (`no_python`); the five add up to 100% and to `samples`.

    `functions` holds own and library functions (import machinery included), `harness_functions`
    the protected files' functions apart: a harness function is never the hottest own function.
    `lines`: the hottest own lines over every function, with their counts. `runs`: how many runs of
    the benchmark command were sampled (a short run is repeated, profilers/pyspy.py)."""

    functions: list[FunctionStat]
    samples: int
    rate_hz: float
    sampled_ms: float
    own_pct: float
    library_pct: float
    import_pct: float
    no_python_pct: float
    harness_pct: float = 0.0
    own_samples: int = 0
    library_samples: int = 0
    import_samples: int = 0
    harness_samples: int = 0
    no_python_samples: int = 0
    harness_functions: list[FunctionStat] = Field(default_factory=list)
    lines: list[LineStat] = Field(default_factory=list)
    runs: int = 1


class KernelTrace(BaseModel):
    """Every kernel of one profiled run, hottest first (by `total_us`); on the CPU (py-spy) no kernel,
    the sampled Python functions in `cpu` instead."""

    backend: str
    kernels: list[KernelStat]
    total_gpu_us: float
    warnings: list[str] = Field(default_factory=list)
    cpu: CpuProfile | None = None
    #: launches grouped by kernel and launch shape, in order of first launch, where the backend
    #: records each launch (CUPTI, rocprofv3 kernel trace); None otherwise (see `trace_groups`)
    groups: list[LaunchGroup] | None = Field(default=None, exclude=True)
    #: the harness's measurement units where the CUPTI injector marked them (HarnessUnit); None
    #: where it did not (no known timer, an older trace): kopt_mcp/profilers/segment.py finds them
    units: list[HarnessUnit] | None = Field(default=None, exclude=True)
    #: compiled-code provenance: kernel name -> SHA-256 of each module (cubin) that defines it
    code: dict[str, list[str]] | None = None
    #: what the in-process injector could not do (harness units, provenance): diagnostics for the run's log
    notes: list[str] = Field(default_factory=list, exclude=True)


def trace_groups(trace: KernelTrace) -> list[LaunchGroup]:
    """The trace's launch groups: `trace.groups` where the backend filled them, else one group per
    kernel (shape unknown) from its per-launch times (`durations_us`, median) or, where those were
    not recorded either, from its average (median_us None, calls and total only)."""
    if trace.groups is not None:
        return list(trace.groups)
    out = []
    for k in trace.kernels:
        order = min(k.launch_order) if k.launch_order else None
        out.append(LaunchGroup(kernel=k.name, calls=k.calls, total_us=k.total_us,
                               median_us=launch_median_us(k.durations_us), first_order=order,
                               durations_us=list(k.durations_us) if k.durations_us else None))
    return out


class Profiler(Protocol):
    """A kernel profiler backend. `name` is "ncu", "none", ..."""

    name: str
    #: True where `parse` fills KernelStat.durations_us (each launch's GPU time, in launch order)
    per_launch: bool

    def available(self) -> bool:
        """True where the backend's binary or library is present on this machine."""
        ...

    def wrap(self, command: str, out_dir: Path) -> str:
        """The shell command that runs `command` under this profiler, writing into `out_dir`."""
        ...

    def parse(self, out_dir: Path) -> KernelTrace:
        """Read what the wrapped run wrote into `out_dir`. Raises ProfilerError."""
        ...


def profile_env(profiler: object) -> dict[str, str]:
    """What a profiled run adds to the benchmark's environment (docs/config.md, "What the benchmark
    gets"): KOPT_PROFILE=1 under a profiler that replays or serialises kernels (Nsight Compute,
    rocprof), so the benchmark may run fewer repetitions; nothing under a trace whose runs are also the
    verdict's script-metric runs (`measures_script`: CUPTI, 0.95-1.00x of a plain run). Such a run must
    time as a plain run does: on an H100 (2026-11-27) the Triton example's KOPT_PROFILE mode, one
    CUDA-event timing as a placeholder, read BEST 50% slow and made a +19.4% GPU-time win `regressed`."""
    return {} if getattr(profiler, "measures_script", False) else {"KOPT_PROFILE": "1"}


def target_gpu_time(trace: KernelTrace, kernel_regex: str | None) -> tuple[float, list[str]]:
    """GPU kernel time (us, summed over launches) of the target kernels, and their names.

    With a regex: every kernel whose name matches (re.search). Without: the hottest kernel that is
    not an input-generation or copy kernel (kernel_names.is_utility_kernel; the hottest of all if
    every kernel is one). Raises ProfilerError if the trace is empty or nothing matches, naming
    the kernels seen.
    """
    if not trace.kernels:
        raise ProfilerError("the profiled run launched no GPU kernel: is the benchmark running on the GPU?")
    if kernel_regex:
        pattern = re.compile(kernel_regex)
        hits = [k for k in trace.kernels if pattern.search(k.name)]
        if not hits:
            seen = ", ".join(k.name[:60] for k in trace.kernels[:5])
            raise ProfilerError(
                f"no kernel matches [profiler] kernel = {kernel_regex!r}; hottest kernels seen: {seen}"
            )
    else:
        hits = [next((k for k in trace.kernels if not is_utility_kernel(k.name)), trace.kernels[0])]
    return sum(k.total_us for k in hits), [k.name for k in hits]


def exact_names_regex(names: list[str]) -> str | None:
    """A regex for `target_gpu_time` that matches exactly the kernels named `names` (each escaped,
    anchored), or None for no names (then the hottest kernel is the target)."""
    return "|".join(f"^{re.escape(n)}$" for n in names) or None


def target_launches(trace: KernelTrace, names: list[str]) -> int:
    """How many times the kernels named `names` (from `target_gpu_time`) were launched in `trace`."""
    return sum(k.calls for k in trace.kernels if k.name in names)


def target_durations(trace: KernelTrace, names: list[str]) -> list[float] | None:
    """Per-launch GPU times (us) of the kernels named `names` (from `target_gpu_time`), merged in
    launch order (so launch i is the same benchmark step in BEST's and a candidate's run even when a
    candidate splits the work between differently named kernels); None when one of them lacks
    per-launch times."""
    launches: list[tuple[float, float]] = []
    for k in (k for k in trace.kernels if k.name in names):
        if k.durations_us is None or k.launch_order is None or len(k.launch_order) != len(k.durations_us):
            return None
        launches.extend(zip(k.launch_order, k.durations_us, strict=True))
    return [d for _, d in sorted(launches)]
