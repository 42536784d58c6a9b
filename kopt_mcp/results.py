"""The structured results the tools return (pydantic models = MCP output schemas).

Units: metric values in the benchmark's own unit (named by `metric`), GPU time in us, changes in %
(+ = better), durations in s.

No number field carries inf or NaN: JSON has no such values (they would arrive as null where the
schema says number, and clients reject the result). Where the domain computes a non-finite value
(a bound while the noise is not yet measurable, a change against 0, a non-numeric error column)
the field is `MaybeFloat`: null in the schema, with a text saying why where it matters.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from kopt_mcp.gpus.gate import GpuCheck
from kopt_mcp.knowledge import Hit
from kopt_mcp.profilers.base import KernelStat
from kopt_mcp.profilers.bottleneck import BottleneckKind
from kopt_mcp.rules.decision import Code, Verdict


def _finite_or_none(v: object) -> object:
    return None if isinstance(v, float) and not math.isfinite(v) else v


MaybeFloat = Annotated[float | None, BeforeValidator(_finite_or_none)]
"""A float that is null where the value is not a finite number (inf, NaN)."""


class Interval(BaseModel):
    """The paired interval behind a verdict (rules.stats.PairedInterval as output): n paired deltas
    (%, + = better), their mean, the SD of one delta (%), degrees of freedom, one-sided `confidence`
    bounds lo/hi (%). Bounds are null while the noise is not measurable yet (df 0); `note` says so."""

    model_config = ConfigDict(from_attributes=True)

    n: int
    mean_pct: MaybeFloat
    sd_delta_pct: MaybeFloat = None
    df: int
    confidence: float
    lo_pct: MaybeFloat
    hi_pct: MaybeFloat
    note: str = ""

    @model_validator(mode="after")
    def _say_why(self) -> Interval:
        if (self.lo_pct is None or self.hi_pct is None) and not self.note:
            self.note = (f"bounds unknown: noise not yet measurable (n={self.n}, df={self.df}); more runs "
                         "(baseline_runs >= 2, or confirming rounds) give them")
        return self


class ClassChange(BaseModel):
    """One config class's change (rules.verdict.ClassDelta as output): metric of BEST and candidate,
    improvement in % per round (+ = better; null against a zero metric), its mean and the interval."""

    model_config = ConfigDict(from_attributes=True)

    key: str
    best: float
    candidate: float
    deltas_pct: list[MaybeFloat]
    mean_pct: MaybeFloat
    interval: Interval | None = None


class DeviceInfo(BaseModel):
    """The device a run used: vendor ("nvidia", "amd", "cpu"), index, name, binding env."""

    vendor: str
    index: int
    name: str
    env: dict[str, str]
    note: str = ""


class GpuResult(BaseModel):
    """find_idle_gpu: the leased device, or why none could be leased (then the session stopped)."""

    leased: bool
    device: DeviceInfo | None
    checks: list[GpuCheck]
    waited_s: float
    reason: str
    stopped: bool = False


class ClassMetric(BaseModel):
    """One config class of one run: metric value, correctness and its error columns."""

    key: str
    metric: float
    correct: bool
    errors: dict[str, MaybeFloat] = Field(default_factory=dict)


class BenchmarkResult(BaseModel):
    """run_benchmark: one run of the fixed command on the workspace (no verdict)."""

    what: str
    device: DeviceInfo
    ok: bool
    gate: str
    reason: str
    metric: str
    classes: list[ClassMetric]
    vs_best_pct: dict[str, MaybeFloat] = Field(default_factory=dict)
    exit_code: int | None
    duration_s: float
    log_path: str
    log_tail: str
    baseline_recorded: bool = False
    best_commit: str
    next_actions: list[str]


class KernelRow(KernelStat):
    """A kernel of the trace report, with a short display name (profiler metrics null where not finite)."""

    short_name: str
    extra: dict[str, MaybeFloat] = Field(default_factory=dict)
    median_us: MaybeFloat = None


class BottleneckOut(BaseModel):
    """profilers.bottleneck.Bottleneck as output: the class, the numbers behind it (null where not
    finite) and the reasoning in one sentence."""

    model_config = ConfigDict(from_attributes=True)

    kind: BottleneckKind
    evidence: dict[str, MaybeFloat] = Field(default_factory=dict)
    reason: str


class TraceResult(BaseModel):
    """kernel_trace_analysis: hottest kernels of one profiled run of the workspace."""

    backend: str
    device: DeviceInfo
    available: bool
    total_gpu_us: float
    kernels: list[KernelRow]
    target_kernels: list[str]
    target_gpu_us: MaybeFloat
    notes: list[str]
    log_path: str
    bottleneck: BottleneckOut | None = Field(
        None, description="bottleneck class of the target kernel (the hottest one without a regex)")


class WarmupResult(BaseModel):
    """warm_up_harness: cold and warm run times (s) with the shared JIT cache folders."""

    command: str
    cold_s: float
    warm_s: float
    ok: bool
    cache_dirs: dict[str, str]
    log_tail: str


class VerdictResult(BaseModel):
    """save_and_test: the verdict on the candidate, the numbers behind it, and what to do next."""

    attempt: int
    verdict: Verdict
    reason: str
    code: Code | None = Field(None, description=(
        "the stable reason code (rules/decision.py Code) where one is assigned: `script_only` on an `improved` "
        "verdict that only the script metric decided (commit_improvement keeps it only where [gates] "
        "allow_script_only_keeps allows), `shadowing`, `protected_path`, `unsafe_symlink`, `tampered` on a "
        "`rejected` one"))
    target: str
    metric: str
    metric_used: str
    classes: list[ClassChange]
    target_deltas_pct: list[MaybeFloat]
    divergent_classes: list[str]
    #: incorrect: per failing config class, each error column's largest |value| (null when not finite)
    class_errors: dict[str, dict[str, MaybeFloat]] = {}
    gpu_best_us: MaybeFloat
    gpu_candidate_us: MaybeFloat
    gpu_delta_pct: MaybeFloat
    rounds: int
    reverted: bool
    repairs_left: int | None
    patch_path: str
    run_dirs: list[str]
    device: DeviceInfo | None
    consecutive_regressions: int
    stopped: bool
    stop_reason: str | None
    warnings: list[str]
    next_actions: list[str]


class RevertResult(BaseModel):
    """revert_to_best: where the working diff was archived and the commit the workspace is at."""

    archived_patch: str | None
    changed_files: list[str]
    best_commit: str
    next_actions: list[str]


class CommitResult(BaseModel):
    """commit_improvement: committed (BEST_COMMIT moved) or not, with the re-measured numbers."""

    committed: bool
    reason: str
    commit: str | None
    best_commit: str
    formatted: bool
    classes: list[ClassChange]
    next_actions: list[str]
    code: Code | None = Field(None, description=(
        "`script_only` when only the script metric decided the keep: committed where [gates] "
        "allow_script_only_keeps allows, refused otherwise"))
    overtaken_rounds: int = Field(default=0, ge=0, description=(
        "earlier commit rounds overtaken: another slot moved BEST_COMMIT during their re-measure, so the "
        "candidate was re-applied onto the newest BEST and measured again (0: none)"))


class AttemptResult(BaseModel):
    """get_attempt: one archived attempt: its ledger record and its patch text (bounded)."""

    attempt: int
    patch_path: str
    patch: str
    truncated: bool
    record: dict | None


class StatusResult(BaseModel):
    """status: where the session stands."""

    phase: str
    tag: str
    branch: str
    workspace: str
    best_commit: str
    best_metrics: dict[str, float]
    best_gpu_us: MaybeFloat
    metric: str
    benchmark_command: str
    attempts: int
    kept: int
    consecutive_regressions: int
    max_consecutive_regressions: int
    repairs_used: int | None
    last_verdict: dict | None
    stop_reason: str | None
    config_sha256: str
    config_changed: bool
    device: DeviceInfo | None
    next_actions: list[str]
    state_dir: str = Field(default="", description="the session's files (state, ledger, attempts, runs), "
                           "outside every tree a benchmark runs in")
    slots: list[dict] = Field(default_factory=list, description="every candidate slot of the session (one per "
                              "agent): slot, phase, attempts, kept, consecutive_regressions, last_verdict")
    sandbox: str = Field(default="", description="the runs' view of the machine: `bwrap: ...` where every run "
                         "is kept from the git directory and the state folder by the operating system, `none (why)` "
                         "where it is not and the state folder is checked after every run instead")
    problems: list[str] = Field(default_factory=list, description="what recovery at start could not fix, and "
                                "a ledger whose hash chain does not verify (truncated, edited, deleted)")


class KnowledgeResult(BaseModel):
    """optimization_knowledge: the techniques that fit, best first, within the character budget."""

    bottleneck: str | None
    bottleneck_source: str
    vendor: str | None
    hits: list[Hit]
    total_chars: int
    max_chars: int
    skills: list[str]
    note: str
