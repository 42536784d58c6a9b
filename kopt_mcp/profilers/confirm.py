"""Commit-time out-of-process confirmation of a keep (issue 11 item 4).

On NVIDIA the keep verdict rests on the CUPTI kernel trace, which is recorded inside the
benchmark's own Python processes (`cupti.py`). Before BEST_COMMIT moves, `confirm_keep` measures
the candidate and BEST once more under a profiler that is the benchmark's PARENT process (Nsight
Compute on NVIDIA, rocprofv3 on AMD) and checks that this independent gain agrees with the claimed
one within the GPU-time floor.

The cheat this answers, written first: a candidate whose benchmark, in its own process,
monkeypatches `time.perf_counter` / `torch.cuda.Event.elapsed_time`, wraps cupti-python's activity
callbacks to shrink the recorded durations, or writes a forged trace into the injector's socket or
file, claims a GPU-time gain it does not have. None of that reaches the confirmation:

- ncu is started by the referee and starts the benchmark itself (`ncu ... bash -c <command>`); the
  CUPTI injector is not on the command's PYTHONPATH, so there is no in-process trace to forge;
- `gpu__time_duration.sum` is read from the GPU's own timers by ncu's injected native library and
  handed to the ncu process over its own channel; ncu (not the benchmark) writes the CSV. Python
  patches of timers, torch or cupti-python do not touch that path;
- ncu serializes every profiled launch, so work hidden on a side stream, or a missing synchronize,
  cannot make the target's launches look shorter;
- the clocks are never changed (`--clock-control none`, as for every run here), so the comparison
  is with the same GPU state the keep metric saw.

What it does not cover (an attack, not optimization): native code that subverts ncu's injection
library, or a benchmark that rewrites ncu's log file (its path is on ncu's command line; it lies
outside the checkout, in the session's run folder). On AMD, rocprofv3 is a launcher that preloads
its tool library into the benchmark; the dispatch timestamps come from the ROCm runtime and are
written by that library at exit, so they are independent of Python-level patches and of the CUPTI
path, but not out of the process in the strict sense.

Pieces:

- `ConfirmNcu` / `ConfirmRocprof`: Profiler-protocol backends for the confirming run (cheap:
  one metric, the target kernels only, a bounded launch count per launch configuration);
- `confirm_profiler`: which of them applies (`[profiler] confirm`, vendor, tool on PATH);
- `target_time`: the target's GPU time per step in one confirming trace;
- `measure_trees`: runs the candidate's and BEST's trees through any executor's `run_profiled`
  and measures each (measurements only: `confirm_keep` in kopt_mcp/referee/confirmation.py decides,
  with the pure rule `decide_confirmation` in kopt_mcp/rules/confirm.py).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path

from kopt_mcp.errors import MeasurementError, ProfilerError
from kopt_mcp.evidence.confirm import TargetTime
from kopt_mcp.evidence.groups import LaunchGroup, target_groups
from kopt_mcp.evidence.names import function_name, short_kernel_name
from kopt_mcp.evidence.trace import KernelTrace, trace_groups
from kopt_mcp.profilers.base import Profiler
from kopt_mcp.profilers.cupti import INJECT_DIR, keep_injector
from kopt_mcp.profilers.ncu import DRAM_METRICS, LOG_NAME, parse_ncu_csv
from kopt_mcp.profilers.ncu_flops import FLOP_METRICS
from kopt_mcp.profilers.ncu_units import NVTX_INCLUDE
from kopt_mcp.profilers.rocprof import OUTPUT_NAME, parse_rocprof_dir

__all__ = ["DEFAULT_LAUNCH_COUNT", "ConfirmNcu", "ConfirmRocprof", "confirm_profiler", "function_names",
           "measure_trees", "selection_key", "target_time"]

#: launches ncu profiles per launch configuration (grid, block, shared memory) of the target: the
#: median of this many is the group's time; ncu serializes each one, so this bounds the cost
DEFAULT_LAUNCH_COUNT = 50
#: by harness unit: the invocations of each unit ncu profiles (the first, do_bench's un-flushed warm
#: call that also compiles, is skipped), and a bound on all profiled launches of the run
UNIT_INVOCATIONS = (1, 6)
UNIT_LAUNCH_BOUND = 20000


#: what the confirming ncu run measures: each target launch's GPU time and its DRAM traffic (speed of light)
CONFIRM_METRICS: tuple[str, ...] = ("gpu__time_duration.sum", *DRAM_METRICS)


def function_names(names: Sequence[str]) -> list[str]:
    """The unqualified function names of demangled kernel names, in order, without repeats:
    "void at::native::reduce_kernel<512, 1>(...)" -> "reduce_kernel" (`evidence.names.function_name`);
    a plain Triton name stays as is. Nsight Compute's default `--kernel-name-base function` matches
    these. Never raises."""
    return list(dict.fromkeys(f for f in map(function_name, names) if f))


def _function_regex(functions: Sequence[str]) -> str:
    """A Python regex matching full (demangled) names whose function is one of `functions`."""
    alt = "|".join(re.escape(f) for f in functions)
    return rf"(?:^|::|\s)(?:{alt})(?:<|\(|$)"


class ConfirmNcu:
    """Nsight Compute as the parent of the benchmark, cheap: CONFIRM_METRICS (`gpu__time_duration.sum`
    and the DRAM bytes read and written, for the speed of light: rules/light.py; the few passes ncu
    needs for them replay the kernel with its memory restored), the target kernels only (`--kernel-name`), the first `launch_count` launches
    of each launch configuration (`--filter-mode per-launch-config`, so every config class is
    sampled), caches left as the previous kernel left them (`--cache-control none`, like the CUPTI
    run) and clocks never touched (`--clock-control none`).

    By harness unit (`by_unit`, where the keep was judged on the injector's marked units): the
    injector's NVTX mode (KOPT_NVTX_UNITS; no CUPTI, nothing written by the benchmark's process) opens
    the range "kopt/u<unit>/i<invocation>" around invocations UNIT_INVOCATIONS of each unit, and ncu
    profiles only the target launches inside them (`--nvtx-include`, push/pop ranges scoped to the
    process, so the launches of autograd's backward thread count), each named by its range. Every
    config is measured, also where all configs launch the target with one grid (a persistent kernel:
    Liger's RMSNorm backward runs on 132 programs for every T, so the launch-configuration filter
    sampled the first T only; H200, 2026-12-02). The cheat this opens, written first: a benchmark
    that opens look-alike ranges chooses which launches are timed, not how long they took; an
    eager optimizer has no reason to, and the times stay ncu's.

    Target selection: `kernel_regex` ([profiler] kernel) is matched by ncu against the demangled
    name (`--kernel-name-base demangled`); else `target_names` (BEST's target kernels, as the CUPTI
    trace named them) by function name (`function_names`, ncu's default name base); with neither,
    every kernel is profiled and the hottest non-utility one is the target. Mangled names (`_Z...`,
    no c++filt where the trace was read) are matched as mangled names."""

    name = "ncu"
    per_launch = True
    #: `--filter-mode`: "per-launch-config" applies `--launch-count` to each launch configuration
    #: (grid, block, shared memory); None leaves ncu's default ("global": the first N launches)
    filter_mode: str | None = "per-launch-config"

    def __init__(self, kernel_regex: str | None = None, target_names: Sequence[str] = (),
                 launch_count: int = DEFAULT_LAUNCH_COUNT, binary: str = "ncu", by_unit: bool = False,
                 flops: bool = False) -> None:
        if launch_count < 1:
            raise ValueError(f"launch_count must be >= 1, got {launch_count}")
        self.kernel_regex = kernel_regex or None
        self.target_names = list(target_names)
        self.launch_count = launch_count
        self.binary = binary
        self.by_unit = by_unit
        self.flops = flops

    @property
    def metrics(self) -> tuple[str, ...]:
        """CONFIRM_METRICS, and with `flops` ([profiler] confirm_flops) the FLOP counters and peaks of
        profilers/ncu_flops.py (3 to 8 replay passes instead of 1: measured cost in that module)."""
        return CONFIRM_METRICS + (FLOP_METRICS if self.flops else ())

    @property
    def keeps_harness(self) -> bool:
        """By unit the benchmark runs as it always does (no KOPT_PROFILE: `base.profile_env`), so its
        harness marks its units; ncu profiles only the marked invocations."""
        return self.by_unit

    def by_launch_config(self) -> ConfirmNcu:
        """The same targets, selected by launch configuration instead of by unit (the fallback where a
        by-unit run found no marked launch)."""
        return ConfirmNcu(self.kernel_regex, self.target_names, self.launch_count, self.binary, by_unit=False,
                          flops=self.flops)

    def available(self) -> bool:
        """True where `binary` resolves on PATH (or is an executable path)."""
        return shutil.which(self.binary) is not None

    def kernel_filter(self) -> list[str]:
        """The ncu arguments that restrict profiling to the target kernels ([] for none)."""
        if self.kernel_regex:
            return ["--kernel-name-base", "demangled", "--kernel-name", f"regex:{self.kernel_regex}"]
        if not self.target_names:
            return []
        if any(n.startswith("_Z") for n in self.target_names):
            alt = "|".join(re.escape(n) for n in self.target_names)
            return ["--kernel-name-base", "mangled", "--kernel-name", f"regex:^({alt})$"]
        alt = "|".join(re.escape(f) for f in function_names(self.target_names))
        return ["--kernel-name-base", "function", "--kernel-name", f"regex:^({alt})$"]

    def wrap(self, command: str, out_dir: Path) -> str:
        """The command line: ncu (parent) running `bash -c command`, every child process profiled,
        raw-page CSV into `out_dir/ncu.csv`."""
        log = Path(out_dir) / LOG_NAME
        if self.by_unit:
            select = ["--nvtx", "--nvtx-push-pop-scope", "process", "--nvtx-include", NVTX_INCLUDE,
                      "--launch-count", str(UNIT_LAUNCH_BOUND)]
        else:
            select = [*(["--filter-mode", self.filter_mode] if self.filter_mode else []),
                      "--launch-count", str(self.launch_count)]
        parts = [shlex.quote(self.binary), "--clock-control", "none", "--cache-control", "none",
                 "--target-processes", "all", *map(shlex.quote, self.kernel_filter()), *select,
                 "--metrics", ",".join(self.metrics), "--csv", "--page", "raw",
                 "--log-file", shlex.quote(str(log)), "bash", "-c"]
        if not self.by_unit:
            return " ".join([*parts, shlex.quote(command)])
        first, count = UNIT_INVOCATIONS
        inject = shlex.quote(str(INJECT_DIR))
        env = f'KOPT_NVTX_UNITS={first},{count} PYTHONPATH={inject}"${{PYTHONPATH:+:$PYTHONPATH}}"'
        return " ".join([env, *parts, shlex.quote(keep_injector(command))])

    def parse(self, out_dir: Path) -> KernelTrace:
        """`out_dir/ncu.csv` with launch groups (kernel, grid, block). Raises ProfilerError."""
        return parse_ncu_csv(Path(out_dir) / LOG_NAME, groups=True)

    def target_regex(self, trace: KernelTrace) -> str | None:
        """The Python regex of the target in the parsed trace (`target_time`): `kernel_regex` where
        it matches a kernel of the trace (Python's `re` and ncu's regex engine may differ at the
        edges), else every kernel ncu profiled where its `--kernel-name` filter chose the targets,
        else None (the hottest non-utility kernel)."""
        if self.kernel_regex and any(re.search(self.kernel_regex, k.name) for k in trace.kernels):
            return self.kernel_regex
        if not self.kernel_filter():
            return None
        return "|".join(f"^{re.escape(k.name)}$" for k in trace.kernels) or None


class ConfirmRocprof:
    """rocprofv3 as the launcher of the benchmark, kernel trace only (dispatch timestamps: no
    replay, no serialization, so no launch bound is needed), CSV under `out_dir`. The target is
    selected after parsing: `kernel_regex`, else BEST's `target_names` by function name, else the
    hottest non-utility kernel."""

    name = "rocprofv3"
    per_launch = True

    def __init__(self, kernel_regex: str | None = None, target_names: Sequence[str] = (),
                 binary: str = "rocprofv3") -> None:
        self.kernel_regex = kernel_regex or None
        self.target_names = list(target_names)
        self.binary = binary

    def available(self) -> bool:
        """True where `binary` resolves on PATH (or is an executable path)."""
        return shutil.which(self.binary) is not None

    def wrap(self, command: str, out_dir: Path) -> str:
        """`rocprofv3 --kernel-trace --output-format csv -d out_dir -o run -- bash -c command`."""
        parts = [shlex.quote(self.binary), "--kernel-trace", "--output-format", "csv", "-d",
                 shlex.quote(str(out_dir)), "-o", OUTPUT_NAME, "--", "bash", "-c", shlex.quote(command)]
        return " ".join(parts)

    def parse(self, out_dir: Path) -> KernelTrace:
        """The kernel trace CSV(s) under `out_dir`. Raises ProfilerError."""
        return parse_rocprof_dir(Path(out_dir))

    def target_regex(self, trace: KernelTrace) -> str | None:
        """The Python regex of the target in the parsed trace (`target_time`): `kernel_regex`, else
        BEST's target kernels by function name, else None (the hottest non-utility kernel)."""
        if self.kernel_regex:
            return self.kernel_regex
        functions = function_names(self.target_names)
        return _function_regex(functions) if functions else None


ConfirmProfiler = ConfirmNcu | ConfirmRocprof


def confirm_profiler(setting: str, vendor: str, kernel_regex: str | None = None,
                     target_names: Sequence[str] = (), launch_count: int = DEFAULT_LAUNCH_COUNT,
                     by_unit: bool = False, flops: bool = False) -> tuple[ConfirmProfiler | None, str]:
    """The confirming profiler for `[profiler] confirm` (`setting`: "auto" | "off") on a GPU of
    `vendor` ("nvidia", "amd", anything else), or None and why there is none. `kernel_regex`:
    [profiler] kernel ("" or None: use `target_names`, BEST's target kernels as the keep metric
    named them); `by_unit`: measure per harness unit (ConfirmNcu; rocprofv3 records every launch and
    needs no selection); `flops`: ncu also counts the target's floating-point work ([profiler] confirm_flops;
    rocprofv3 has no such counters here). Raises ValueError for an unknown setting."""
    if setting not in ("auto", "off"):
        raise ValueError(f'[profiler] confirm must be "auto" or "off", got {setting!r}')
    if setting == "off":
        return None, '[profiler] confirm = "off": no out-of-process confirmation'
    v = vendor.lower()
    if v == "nvidia":
        prof: ConfirmProfiler = ConfirmNcu(kernel_regex, target_names, launch_count, by_unit=by_unit, flops=flops)
        missing = "ncu (Nsight Compute) is not on PATH where the server runs"
    elif v == "amd":
        prof = ConfirmRocprof(kernel_regex, target_names)
        missing = "rocprofv3 (ROCprofiler-SDK) is not on PATH where the server runs"
    else:
        return None, f"no out-of-process profiler for a {vendor!r} device (NVIDIA: ncu, AMD: rocprofv3)"
    if not prof.available():
        return None, missing
    return prof, f"{prof.name} as the benchmark's parent process"


def target_time(trace: KernelTrace, kernel_regex: str | None) -> TargetTime:
    """The target's GPU time per step in one out-of-process trace: the launch groups of the kernels
    `kernel_regex` matches (re.search on the full name: the confirming profiler's `target_regex`;
    None: the hottest non-utility kernel's), each group's median launch summed (us). Where the
    trace has harness units (ncu's by-unit run), per unit the median over its invocations of the
    matched kernels' time per invocation (`TargetTime.units`), summed. Raises ProfilerError when
    nothing matches or a group has no per-launch times; re.error for a `kernel_regex` that is not a
    regular expression."""
    groups: list[LaunchGroup] = target_groups(trace_groups(trace), kernel_regex)
    if any(g.median_us is None for g in groups):
        raise ProfilerError("the out-of-process profiler did not record each launch's GPU time")
    kernels = list(dict.fromkeys(g.kernel for g in groups))
    units = _unit_medians(trace, set(kernels))
    return TargetTime(us=sum(units.values()) if units else sum(g.median_us for g in groups),
                      launches=sum(g.calls for g in groups), groups=[g.label() for g in groups],
                      kernels=list(dict.fromkeys(short_kernel_name(k, 60) for k in kernels)), units=units,
                      **_dram(trace, kernels, groups), **_flops(trace, kernels))


def _dram(trace: KernelTrace, kernels: list[str], groups: list[LaunchGroup]) -> dict:
    """TargetTime's DRAM fields (evidence/confirm.py) for the target `kernels`; {} where ncu measured no
    DRAM bytes (an older command line, rocprofv3)."""
    chosen = set(kernels)
    stats = [k for k in trace.kernels if k.name in chosen]
    out: dict = {}
    peaks = [k.extra["dram_peak_gbps"] for k in stats if "dram_peak_gbps" in k.extra]
    if peaks:
        out.update(peak_gbps=max(peaks), peak_source="ncu: device memory bus width x memory clock x 2")
    persisting = [k.extra["persisting_l2_bytes"] for k in stats if "persisting_l2_bytes" in k.extra]
    if persisting:
        out["persisting_l2_bytes"] = max(persisting)
    measured = [k for k in stats if "dram_bytes" in k.extra]
    if not measured:
        return out
    rates = [k.extra["dram_bytes"] / k.avg_us / 1e3 for k in measured if k.avg_us > 0]
    by_bytes = {u.index: u for u in trace.unit_bytes or []}
    unit_bytes, unit_rates = {}, []
    for u in trace.units or []:
        b, hit = by_bytes.get(u.index), u.invocations_of(kernels)
        if b is None or not hit:
            continue
        unit_bytes[u.index] = statistics.median(b.invocation_us(kernels, i) for i in hit)
        moved, took = sum(b.invocation_us(kernels, i) for i in hit), sum(u.invocation_us(kernels, i) for i in hit)
        if took > 0:
            unit_rates.append(moved / took / 1e3)
    per_launch = {k.name: k.extra["dram_bytes"] for k in measured}
    step = sum(unit_bytes.values()) if unit_bytes else sum(per_launch.get(g.kernel, 0.0) for g in groups)
    out.update(dram_bytes=step, unit_bytes=unit_bytes, gbps=max(unit_rates or rates or [0.0]))
    return out


def _flops(trace: KernelTrace, kernels: list[str]) -> dict:
    """TargetTime's FLOP fields for the target `kernels`: per math path, the rate (operations per second:
    the kernel's mean work per launch / its mean GPU time) of the target kernel nearest that path's peak,
    and that kernel's peak; {} where ncu counted no floating-point work (profilers/ncu_flops.py)."""
    nearest: dict[str, tuple[float, float | None]] = {}

    def closeness(rate_peak: tuple[float, float | None]) -> tuple[float, float]:
        rate, peak = rate_peak
        return (rate / peak if peak else -1.0, rate)

    chosen = set(kernels)
    for k in (k for k in trace.kernels if k.name in chosen and k.avg_us > 0):
        for path in (key.removeprefix("flops ") for key in k.extra if key.startswith("flops ")):
            here = (k.extra[f"flops {path}"] / (k.avg_us * 1e-6), k.extra.get(f"flop_peak {path}"))
            if here[0] > 0 and (path not in nearest or closeness(here) > closeness(nearest[path])):
                nearest[path] = here
    if not nearest:
        return {}
    return {"flop_rates": {p: r for p, (r, _) in nearest.items()},
            "flop_peaks": {p: pk for p, (_, pk) in nearest.items() if pk}}


def _unit_medians(trace: KernelTrace, kernels: set[str]) -> dict[int, float]:
    """Unit index -> median over its invocations of `kernels`' summed GPU time per invocation (us),
    for the units whose invocations launched one of them; {} without units."""
    return {u.index: statistics.median(u.invocation_us(kernels, i) for i in hit)
            for u in trace.units or [] if (hit := u.invocations_of(kernels))}


RunProfiled = Callable[[str, Profiler, str], KernelTrace]


def selection_key(prof: ConfirmProfiler) -> str:
    """The confirming profiler's target selection as one string (backend, by unit or by launch
    configuration, kernel regex, target names, launch count, and "flops" where the FLOP counters were
    read): two measurements compare only under the same key (rules/confirm.py reusable_best)."""
    key = [prof.name, bool(getattr(prof, "by_unit", False)), getattr(prof, "kernel_regex", None),
           list(getattr(prof, "target_names", [])), getattr(prof, "launch_count", None)]
    # FLOP counters add replay passes, which move a small kernel's measured time (profilers/ncu_flops.py):
    # a measurement with them is not BEST's for one without, nor the other way round
    return json.dumps(key + (["flops"] if getattr(prof, "flops", False) else []))


def measure_trees(run_profiled: RunProfiled, cand_tree: str, best_tree: str, prof: ConfirmProfiler,
                  best_known: TargetTime | None = None) -> dict[str, tuple[TargetTime | None, str | None]]:
    """Run the candidate's tree, then BEST's, under the confirming profiler `prof` and measure each
    (`target_time` with `prof.target_regex`). `run_profiled(tree, profiler, label)`: runs the fixed
    benchmark of snapshot `tree` under `profiler` and returns `profiler.parse(run_dir)`, raising
    ProfilerError / MeasurementError where the run failed or left no trace. `best_known`: BEST's
    measurement under the same selection, stored from an earlier run of its tree: BEST is not run.

    Returns label ("confirm-candidate", "confirm-best": run folder names) -> (TargetTime, None), or
    (None, why) where that run gave no measurement (ProfilerError, MeasurementError, a bad regex).
    Any other exception (e.g. the referee's Tampered) propagates."""
    out: dict[str, tuple[TargetTime | None, str | None]] = {}
    for label, tree in (("confirm-candidate", cand_tree), ("confirm-best", best_tree)):
        if label == "confirm-best" and best_known is not None:
            out[label] = (best_known, None)
            continue
        try:
            trace = run_profiled(tree, prof, label)
            out[label] = (target_time(trace, prof.target_regex(trace)), None)
        except (ProfilerError, MeasurementError, re.error) as e:
            out[label] = (None, str(e))
    return out
