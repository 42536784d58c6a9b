"""The structured results the tools return (pydantic models = MCP output schemas).

Units: metric values in the benchmark's own unit (named by `metric`), GPU time in us, changes in %
(+ = better), durations in s.

No number field carries inf or NaN: JSON has no such values (they would arrive as null where the
schema says number, and clients reject the result). Where the domain computes a non-finite value
(a bound while the noise is not yet measurable, a change against 0, a non-numeric error column)
the field is `MaybeFloat`: null in the schema, with a text saying why where it matters.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from kopt_mcp.evidence.trace import CpuProfile, KernelStat
from kopt_mcp.gpus.gate import GpuCheck
from kopt_mcp.knowledge import Hit
from kopt_mcp.profilers.bottleneck import BottleneckKind
from kopt_mcp.rules.best_record import RecordCheck
from kopt_mcp.readers.test_summary import CorrectnessRun
from kopt_mcp.rules.decision import Code, MeasuredOutcome, Verdict
from kopt_mcp.results_change import ClassChange, ClassGain, Cost, Detectable, Interval, MaybeFloat

GpuOnly = Annotated[MaybeFloat, Field(exclude_if=lambda v: v is None)]  # left out where no GPU profiler measured it


class Omitted(BaseModel):
    """What a tool result left out to stay small (MCP clients cap a result at about 25k tokens): per
    field, how many entries; `see` names where every entry is (the HTML report, performance.md, the
    ledger)."""

    counts: dict[str, int]
    kept: str
    see: str


OMITTED = "per-class lists cut to stay small: how many entries were left out, which were kept, where all are"


class DeviceInfo(BaseModel):
    """The device a run used: vendor ("nvidia", "amd", "cpu"), index, name, binding env."""

    vendor: str
    index: int
    name: str
    env: dict[str, str]
    note: str = ""


class GpuResult(BaseModel):
    """find_idle_device (find_idle_gpu: deprecated): the leased device, or why none could be (the session stopped)."""

    leased: bool
    device: DeviceInfo | None
    checks: list[GpuCheck]
    waited_s: float
    reason: str
    stopped: bool = False


class ClassMetric(BaseModel):
    """One config class of one run: metric value, correctness and its error columns. For the baseline
    (several runs of unmodified BEST_COMMIT) also each run's metric and their spread."""

    key: str
    metric: float
    correct: bool
    errors: dict[str, MaybeFloat] = Field(default_factory=dict)
    runs: list[float] = Field(default_factory=list, description="baseline: the metric of each run, in order "
                              "(`metric` is their median)")
    spread_pct: MaybeFloat = Field(None, description=(
        "baseline: the run-to-run spread of this class over `runs`, as the noise estimate measures it: the SD "
        "of 100 x ln(metric) from successive runs (% of one run; rules/stats.py noise_from_groups); null with "
        "fewer than 2 runs. This class's own: the global target's is `detectable.target_spread_pct`, smaller where "
        "the classes' noise is independent (their geometric mean averages it out)"))


class OwnKernel(BaseModel):
    """A kernel of a trace that the repository's own sources define (kopt_mcp/bench/kernel_sources.py)."""

    name: str
    share_pct: float = Field(description="% of the trace's GPU kernel time")


class GpuTarget(BaseModel):
    """The kernels whose GPU time decides every verdict of the session (the baseline's first profile):
    `by` "regex" where [profiler] kernel names them, "hottest" where it is empty (the trace's hottest
    kernel that is not input generation or a copy: often not the repository's own, e.g. a GEMM beside
    a Triton kernel)."""

    kernels: list[str]
    by: Literal["regex", "hottest"]
    own: list[OwnKernel] = Field(default_factory=list, description=(
        "by \"hottest\": the trace's kernels this repository's sources define (kernel_sources.py), hottest "
        "first; empty where it defines none of them"))
    own_regex: str | None = Field(None, description=(
        "the anchored regex of `own` for [profiler] kernel (set it and start a new session to judge them)"))


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
    detectable: Detectable | None = Field(None, description=(
        "the baseline: the smallest gain a verdict can detect with the measured spread and the configured rounds, "
        "and the rounds that would detect other gains (save_and_test's `rounds`, within [gates] max_rounds_asked)"))
    gpu_target: GpuTarget | None = Field(None, description=(
        "the baseline under a profiler: the kernels whose GPU time decides every verdict, and how they were chosen"))
    best_commit: str
    next_actions: list[str]
    omitted: Omitted | None = Field(None, description=OMITTED)


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
    """kernel_trace_analysis: hottest kernels of one profiled run of the workspace; on a CPU device the
    hottest Python functions of a sampled run instead (`cpu`)."""

    backend: str
    device: DeviceInfo
    available: bool
    total_gpu_us: GpuOnly = None
    kernels: list[KernelRow]
    target_kernels: list[str]
    target_gpu_us: GpuOnly = None
    notes: list[str]
    log_path: str
    own_kernels: list[OwnKernel] = Field(default_factory=list, description=(
        "GPU: the trace's kernels this repository's sources define (kopt_mcp/bench/kernel_sources.py), hottest "
        "first, also where below `top`"))
    own_regex: str | None = Field(None, description="the anchored regex of `own_kernels`, for [profiler] kernel")
    bottleneck: BottleneckOut | None = Field(
        None, description="bottleneck class of the target kernel (the hottest one without a regex); "
        "on a CPU, cpu-bound with where the samples went")
    cpu: CpuProfile | None = Field(None, description=(
        "CPU device: py-spy's sampled run (`runs` runs of the benchmark: a short one is repeated): functions "
        "hottest first by self time (ms of thread time, % of samples, and the samples behind them; own = the "
        "repository's code outside the protected paths, file:line = the hottest line, `lines` its hottest "
        "lines), the protected harness's functions apart (`harness_functions`: the benchmark, the reference; "
        "never the hottest own function), the hottest own lines, and the share and count of samples in own "
        "code, libraries, the harness, imports"))


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
    code: Code = Field(description=(
        "why, stable: branch on it (kopt_mcp/rules/decision.py Code; e.g. gpu_time_below_floor, script_noise). "
        "`script_only` on an `improved` verdict that only the script metric decided (commit_improvement keeps it "
        "only where [gates] allow_script_only_keeps allows); `shadowing`, `protected_path`, `unsafe_symlink`, "
        "`tampered` on a `rejected` one"))
    reason: str
    target: str
    metric: str
    metric_used: str
    classes: list[ClassChange]
    target_deltas_pct: list[MaybeFloat]
    target_interval: Interval | None = Field(None, description=(
        "the script metric's paired interval of the target, the one the reason's script-metric numbers are (mean_pct, "
        "ratio_x, lo/hi, confidence per look, looks, overall_confidence); null where no round was measured"))
    divergent_classes: list[str]
    record: RecordCheck | None = Field(None, description=(
        "no profiler: the candidate's runs against BEST's runs of the session as one sample (rules/best_record.py), "
        "on a script-metric keep or where it refused one (code script_within_best_record)"))
    #: incorrect: per failing config class, each error column's largest |value| (null when not finite)
    class_errors: dict[str, dict[str, MaybeFloat]] = {}
    gpu_best_us: GpuOnly = None
    gpu_candidate_us: GpuOnly = None
    gpu_delta_pct: GpuOnly = None
    #: the GPU-time floor (%) the gain had to clear (rules/floor.py); absent without a GPU profiler
    gpu_floor_pct: GpuOnly = None
    rounds: int
    rounds_under_load: int = Field(0, description="paired rounds that ran under foreign load on the device (other "
                                   "processes at or above [gates] idle_cpu_pct, or another compute process on the GPU): "
                                   "measured again, left out of the decision, or counted as the reason says "
                                   "(rules/load.py)")
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
    cost: Cost | None = Field(None, description=(
        "what the verdict spent: benchmark runs (profiled or plain), their wall time (s) and that as a multiple of "
        "one plain run of the benchmark"))
    omitted: Omitted | None = Field(None, description=OMITTED)
    correctness: CorrectnessRun | None = Field(None, description=(
        "the [correctness] command's run on the candidate: exit status, wall time (s), passed/failed/skipped/errors "
        "counts where its output says them; null when no correctness command ran"))


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
    code: Code = Field(description=(
        "why, stable: branch on it. Committed: still_better, or confirmed / unconfirmed where the out-of-process "
        "confirmation ran. Not committed: no_longer_better, refuted, conflict, tampered, protected_path / "
        "unsafe_symlink (the format command), the failed re-measure's gate code (run_crashed, results_stale, ...) "
        "or the re-profiled keep metric's (gpu_time_below_floor, ...); script_only when only the script metric decided "
        "the keep: committed where [gates] allow_script_only_keeps allows, refused otherwise. With neutral_reason: "
        "neutral_kept, or neutral_refused_no_reason / _not_tie / _best_moved / _worse_class (rules/commit.py)"))
    commit: str | None
    best_commit: str
    neutral: bool = Field(False, description=(
        "a neutral keep (code neutral_kept): a `tie` kept because the agent asked by name (`neutral_reason`: a "
        "correctness or robustness fix), no class worse beyond the noise threshold; never counted as a gain"))
    formatted: bool
    classes: list[ClassChange]
    next_actions: list[str]
    format_status: Literal["not_configured", "unchanged", "changed", "not_run"] = Field(
        default="not_run", description="why `formatted` is what it is: no [format] command configured, the [format] "
        "command changed nothing, it changed the candidate (the formatted tree was re-measured), or the commit step "
        "ended before formatting")
    formatted_reason: str = Field(default="", description="format_status in words")
    included: list[str] = Field(default_factory=list, description=(
        "[commit] include result files committed with the keep, as the re-measure's run of the tested tree "
        "wrote them"))
    cost: Cost | None = Field(None, description=(
        "the re-measure's benchmark runs (the out-of-process confirmation's included), their wall time (s) and "
        "that as a multiple of one plain run"))
    overtaken_rounds: int = Field(default=0, ge=0, description=(
        "earlier commit rounds overtaken: another slot moved BEST_COMMIT during their re-measure, so the "
        "candidate was re-applied onto the newest BEST and measured again (0: none)"))
    omitted: Omitted | None = Field(None, description=OMITTED)


class SessionGainResult(BaseModel):
    """measure_session_gain / `kopt-mcp compare`: commit `head_commit` measured against `base_commit`
    (default: the session's baseline commit against BEST_COMMIT) in one paired run on one lease under
    the session's rules. Changes in % (+ = head better), ratios in x (how many times better head is);
    `classes`: each class's base and head metric, with its ratio and paired interval; GPU time in us."""

    base_commit: str
    head_commit: str
    metric: str
    outcome: MeasuredOutcome = Field(description="what the session's rules conclude on head against base")
    rounds: int = Field(description="paired rounds run (each: one run of head, one of base)")
    target: str = Field(description='"global": the geometric mean over the config classes')
    target_pct: MaybeFloat
    target_lo_pct: MaybeFloat
    target_hi_pct: MaybeFloat
    confidence: float = Field(description="one-sided confidence of the bounds ([gates] confidence)")
    ratio_x: MaybeFloat = Field(description="how many times better head is on the target (2.0: twice as fast)")
    classes: list[ClassGain]
    rounds_under_load: int = Field(0, description="paired rounds that ran under foreign load on the device: measured "
                                   "again within [gates] max_rounds and left out, as save_and_test does (rules/load.py)")
    gpu_base_us: GpuOnly = None
    gpu_head_us: GpuOnly = None
    gpu_gain_pct: GpuOnly = Field(None, description="the target kernels' profiler GPU time, + = less (GPU only)")
    gpu_note: str = ""
    headline: str = Field(description="the result in one line, as the Stop Summary and the report show it")
    device: DeviceInfo | None
    run_dirs: list[str]
    warnings: list[str]


class EndSessionResult(BaseModel):
    """end_session: the session ended on purpose (phase `stopped`, reason `ended by the agent`): its
    measured gain (measure_session_gain: the baseline commit against BEST_COMMIT, paired), the Stop
    Summary written to performance.md and the commit that holds it on the session's branch."""

    stopped: bool
    stop_reason: str
    best_commit: str
    branch: str
    summary_commit: str | None = Field(description="the commit on `branch` holding the Stop Summary (null where git "
                                       "refused the commit: the ledger holds the summary)")
    summary: str = Field(description="the Stop Summary as written to performance.md (markdown)")
    gain: SessionGainResult | None = Field(description="the session's measured gain, the Stop Summary's headline; "
                                           "null where none was measured (`gain_note` says why)")
    gain_note: str = Field("", description="why no gain was measured: no baseline, no keep (BEST_COMMIT is the "
                           "baseline commit), no device, a failed run; \"\" when measured")
    kept: int = Field(description="improvements kept in the session (neutral keeps not counted)")
    kept_neutral: int = Field(0, description="neutral keeps (commit_improvement's `neutral_reason`): never a gain")


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
    best_gpu_us: GpuOnly = None
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
    problem: str = Field(default="", description="phase `unconfigured`: why the session could not open (a bad "
                         "--repo, not a git repository, a wrong kopt.toml, a command or workdir that cannot start, "
                         "another server on the repository); every other tool refuses with this text")
    fix: str = Field(default="", description="phase `unconfigured`: what to do so the session opens")
    omitted: Omitted | None = Field(None, description=OMITTED)


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
