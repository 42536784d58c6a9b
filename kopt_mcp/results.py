"""The structured results the tools return (pydantic models = MCP output schemas).

Units: metric values in the benchmark's own unit (named by `metric`), GPU time in us, changes in %
(+ = better), durations in s.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from kopt_mcp.gpus.gate import GpuCheck
from kopt_mcp.knowledge import Hit
from kopt_mcp.profilers.base import KernelStat
from kopt_mcp.profilers.bottleneck import Bottleneck
from kopt_mcp.rules.verdict import ClassDelta
from kopt_mcp.session import Verdict


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
    errors: dict[str, float] = Field(default_factory=dict)


class BenchmarkResult(BaseModel):
    """run_benchmark: one run of the fixed command on the workspace (no verdict)."""

    what: str
    device: DeviceInfo
    ok: bool
    gate: str
    reason: str
    metric: str
    classes: list[ClassMetric]
    vs_best_pct: dict[str, float] = Field(default_factory=dict)
    exit_code: int | None
    duration_s: float
    log_path: str
    log_tail: str
    baseline_recorded: bool = False
    best_commit: str
    next_actions: list[str]


class KernelRow(KernelStat):
    """A kernel of the trace report, with a short display name."""

    short_name: str


class TraceResult(BaseModel):
    """kernel_trace_analysis: hottest kernels of one profiled run of the workspace."""

    backend: str
    device: DeviceInfo
    available: bool
    total_gpu_us: float
    kernels: list[KernelRow]
    target_kernels: list[str]
    target_gpu_us: float | None
    notes: list[str]
    log_path: str
    bottleneck: Bottleneck | None = Field(
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
    target: str
    metric: str
    metric_used: str
    classes: list[ClassDelta]
    target_deltas_pct: list[float]
    divergent_classes: list[str]
    gpu_best_us: float | None
    gpu_candidate_us: float | None
    gpu_delta_pct: float | None
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
    classes: list[ClassDelta]
    next_actions: list[str]


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
    best_gpu_us: float | None
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
