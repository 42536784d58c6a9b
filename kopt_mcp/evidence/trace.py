"""What a profiler reports (pure data and the functions over it): every kernel of one profiled run
(KernelTrace), its launch groups (`trace_groups`), and the target kernels' GPU time, names, launch
counts and per-launch times. Backends (kopt_mcp/profilers/) fill it; the rules decide on it.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.groups import LaunchGroup, launch_median_us
from kopt_mcp.evidence.names import is_utility_kernel
from kopt_mcp.evidence.units import HarnessUnit


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
    #: where it did not (no known timer, an older trace): kopt_mcp/evidence/segment.py finds them
    units: list[HarnessUnit] | None = Field(default=None, exclude=True)
    #: the same units with DRAM bytes (read + written) in place of GPU time (`per_invocation` in bytes),
    #: where ncu measured dram__bytes_* by unit (profilers/ncu.py); None otherwise
    unit_bytes: list[HarnessUnit] | None = Field(default=None, exclude=True)
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


def target_gpu_time(trace: KernelTrace, kernel_regex: str | None) -> tuple[float, list[str]]:
    """GPU kernel time (us, summed over launches) of the target kernels, and their names.

    With a regex: every kernel whose name matches (re.search). Without: the hottest kernel that is
    not an input-generation or copy kernel (evidence.names.is_utility_kernel; the hottest of all if
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
