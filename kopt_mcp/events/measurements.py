"""Diagnostic events that carry a measurement (Store.log: no state change goes with them): a
snapshot of a tested tree, a quick run, a failed baseline, a trace, a warm-up, an out-of-process
confirmation, a session gain."""

from __future__ import annotations

from typing import Any, Literal

from kopt_mcp.events.base import _OnSlot
from kopt_mcp.events.payloads import BottleneckRecord, ClassChange, FileChangeRecord, FunctionLine, KernelLine


class Snapshot(_OnSlot):
    """An attempt's tested tree frozen as a commit on a hidden ref (`formatted`: the format
    command's tree)."""

    required = ("attempt", "tree")
    event: Literal["snapshot"]
    attempt: int | None = None
    commit: str | None = None
    tree: str = ""
    ref: str = ""
    formatted: bool = False
    #: re-applied onto the newest BEST (another slot committed first): judged against, merged onto
    reapplied: bool = False
    judged_against: str | None = None
    best_commit: str | None = None


class RunBenchmark(_OnSlot):
    """run_benchmark's quick check of the workspace: gate (ok/incorrect/failed), metric per class,
    run folder, snapshot tree, files the run changed in its checkout."""

    event: Literal["run_benchmark"]
    gate: str = ""
    values: dict[str, float] = {}
    run_dir: str = ""
    snapshot: str = ""
    changes: list[FileChangeRecord] = []


class BaselineFailed(_OnSlot):
    """The unmodified benchmark failed the correctness gate."""

    event: Literal["baseline_failed"]
    reason: str = ""
    run_dir: str = ""


class Trace(_OnSlot):
    """kernel_trace_analysis: profiler backend, GPU time (us) of the target kernels and of all
    kernels, the hottest kernels, the target's bottleneck class; on a CPU (py-spy) the hottest
    Python functions instead of kernels."""

    event: Literal["trace"]
    run_dir: str = ""
    target_gpu_us: float | None = None
    target_kernels: list[str] = []
    backend: str = ""
    bottleneck: BottleneckRecord | None = None
    total_gpu_us: float | None = None
    kernels: list[KernelLine] = []
    functions: list[FunctionLine] = []
    #: the BEST_COMMIT when it was taken, and whether the profiled tree was BEST's own (False: a
    #: candidate's edits); absent in older records (research_directions: a stale trace)
    best_commit: str = ""
    of_best: bool | None = None


class Warmup(_OnSlot):
    """warm_up_harness: cold and warm run time (s), both ok, snapshot, files changed."""

    event: Literal["warmup"]
    cold_s: float | None = None
    warm_s: float | None = None
    ok: bool | None = None
    snapshot: str = ""
    changes: list[FileChangeRecord] = []


class Confirmation(_OnSlot):
    """commit_improvement's out-of-process confirmation of a GPU-time keep (profilers.confirm):
    confirmed / refuted / unavailable, why, the profiler, the claimed and measured gains (%), the
    floor and tolerance (%), and each side's time per step (us) as measured out of process."""
    required = ("attempt", "status")
    event: Literal["confirmation"]
    attempt: int | None = None
    status: Literal["confirmed", "refuted", "unavailable"]
    code: str | None = None  # why, stable (kopt_mcp.rules.decision.Code: confirmed / refuted / unconfirmed)
    reason: str = ""
    backend: str | None = None
    claimed_gain_pct: float | None = None
    floor_pct: float | None = None
    tolerance_pct: float | None = None
    best: dict[str, Any] | None = None
    candidate: dict[str, Any] | None = None
    gain_pct: float | None = None
    runs: list[str] = []
    selection: str | None = None  # the target selection (profilers/confirm.py selection_key)
    best_reused: bool = False  # BEST's figure is the stored one of its tree (no run)


class SessionGain(_OnSlot):
    """measure_session_gain / `kopt-mcp compare` (referee.gain): `head_commit` measured against
    `base_commit` in `rounds` paired rounds: the rules' `outcome`, the `global` target's change and
    bounds (%, + = head better) at `confidence`, `ratio_x`, per-class changes, GPU time of both (us)
    and its gain (%, + = less GPU time), the one-line `headline`, the run folders."""

    required = ("base_commit", "head_commit", "headline")
    event: Literal["session_gain"]
    base_commit: str = ""
    head_commit: str = ""
    metric: str = ""
    outcome: str = ""
    rounds: int = 0
    target: str = "global"
    target_pct: float | None = None
    target_lo_pct: float | None = None
    target_hi_pct: float | None = None
    confidence: float | None = None
    ratio_x: float | None = None
    classes: list[ClassChange] = []
    rounds_under_load: int = 0
    gpu_base_us: float | None = None
    gpu_head_us: float | None = None
    gpu_gain_pct: float | None = None
    gpu_note: str = ""
    headline: str = ""
    run_dirs: list[str] = []
    warnings: list[str] = []
