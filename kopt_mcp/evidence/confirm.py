"""What the out-of-process confirmation measures (pure data): the target's GPU time per step in one run
under a profiler that is the benchmark's parent (kopt_mcp/profilers/confirm.py); the rule over it is
kopt_mcp/rules/confirm.py."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TargetTime(BaseModel):
    """The target's GPU time in one out-of-process run: `us` = sum over its launch groups (kernel,
    grid, block) of the median launch (us per benchmark step, the quantity of the keep metric's
    gpu_best_us / gpu_candidate_us); `launches`: profiled target launches; `groups`: launch groups
    (display labels); `kernels`: the target kernels' short names.

    Measured by harness unit (the run's launches carry the injector's unit marks): `units[k]` is unit
    k's median over its profiled invocations of the target's GPU time per invocation (us), and `us` is
    their sum, the quantity of a keep judged by unit (rules/units.py: sum over units of the median per
    invocation)."""

    us: float
    launches: int
    groups: list[str]
    kernels: list[str]
    units: dict[int, float] = Field(default_factory=dict)
    #: DRAM traffic where ncu measured dram__bytes_read/write.sum (issue 38 item 3): bytes per step (the
    #: quantity of `us`: per unit the median bytes per invocation, summed; else per target kernel its mean
    #: bytes per launch, summed), per unit (`unit_bytes`), the achieved bandwidth (GB/s, the highest of
    #: the units' or kernels' total bytes / total GPU time), the device's peak DRAM bandwidth (GB/s) and
    #: where it came from, and the largest persisting-L2 size a target launch ran with (bytes)
    dram_bytes: float | None = None
    unit_bytes: dict[int, float] = Field(default_factory=dict)
    gbps: float | None = None
    peak_gbps: float | None = None
    peak_source: str | None = None
    persisting_l2_bytes: float | None = None
    #: floating-point work where ncu counted it ([profiler] confirm_flops; profilers/ncu_flops.py): per math
    #: path ("fp32", "tensor fp16", ...) the achieved rate (operations per second) of the target kernel that
    #: came closest to that path's peak, and that kernel's peak for the path (operations per second)
    flop_rates: dict[str, float] = Field(default_factory=dict)
    flop_peaks: dict[str, float] = Field(default_factory=dict)


class StoredTargetTime(BaseModel):
    """A tree's out-of-process TargetTime kept by the referee (session state) so that the next commit's
    confirmation, whose BEST is that tree, need not run BEST again: `tree` (git tree hash measured),
    `commit` (the BEST_COMMIT that holds it once committed: the tree plus performance.md; None before),
    `selection` (the confirming profiler's target selection: backend, by unit or by launch
    configuration, kernel regex, target names, launch count), `device` (the measuring device's id),
    `at` (time.time() of the measurement, s), `time` (what was measured). Written by kopt from the
    profiler's own output, never by the benchmark's process."""

    tree: str
    commit: str | None = None
    selection: str
    device: str | None = None
    at: float
    time: TargetTime
