"""The events that go with a state change of the session (written through `ledger.new_record` or
`Referee.record`): session start, baseline, attempt verdict, commit or its refusal, revert, stop,
recovery."""

from __future__ import annotations

from typing import Any, Literal

from kopt_mcp.events.base import _Event, _OnSlot
from kopt_mcp.events.payloads import ClassChange, DeviceRecord, GpuKeep, PerfRow
from kopt_mcp.rules.decision import AttemptVerdict


class SessionStarted(_Event):
    """A new session: its tag, branch, BEST_COMMIT at start, config hash, and the performance.md
    text it started from (None: no performance.md in that commit)."""

    required = ("tag", "branch", "best_commit")
    event: Literal["session_started"]
    tag: str = ""
    branch: str = ""
    best_commit: str = ""
    config_sha256: str = ""
    performance_md: str | None = None


class Baseline(_OnSlot):
    """The baseline of unmodified BEST_COMMIT: median metric per class over `runs`, GPU time (us)
    of the target `kernels`, each profiled run's GPU time, and its performance.md `rows`."""

    required = ("best_commit", "metrics")
    event: Literal["baseline"]
    best_commit: str = ""
    metrics: dict[str, float] = {}
    runs: list[dict[str, float]] = []
    gpu_us: float | None = None
    kernels: list[str] = []
    gpu_profiles_us: list[float] = []
    device: DeviceRecord | str | None = None  # type: ignore[assignment]  # the DeviceInfo dump
    device_id: str | None = None  # the job lease's device, e.g. "nvidia:0:GPU-<uuid>"
    run_dir: str = ""
    rows: list[PerfRow] = []
    adopted_runs: int = 0  # of `runs`, `kopt-mcp init`'s (referee/baseline_adopt.py)
    adopted_tests: bool = False  # init's run of the [correctness] command stood for the baseline's
    adoption_code: str = ""  # why init's runs were not adopted ('' where they were): Adoption.code
    #: of `runs`, read from the baseline's own profiled runs (a `measures_script` profiler: referee/baseline.py)
    profiled_runs: int = 0
    #: of `gpu_profiles_us`, the first ones read from init's trace of its run under the same profiler
    adopted_profiles: int = 0


class Attempt(_OnSlot):
    """The verdict on attempt `attempt`: reason, target class, hypothesis, changed files, archived
    patch, per-class changes, run folders, the keep decision (`gpu`), and whether it was reverted."""

    required = ("attempt", "verdict")
    event: Literal["attempt"]
    attempt: int
    verdict: AttemptVerdict
    #: why, stable (kopt_mcp.rules.decision.Code); absent in records written before codes existed
    code: str | None = None
    reason: str = ""
    target: str | None = None
    hypothesis: str = ""
    changed: list[str] = []
    patch: str | None = None
    classes: list[ClassChange] = []
    runs: list[str] = []
    gpu: GpuKeep | None = None
    reverted: bool | None = None
    #: devices whose lease was lost mid-call (DeviceLost) before the call was retried on a new lease
    lost_devices: list[str] = []
    #: compiled-code provenance: {"best", "candidate": {"code": {kernel: [cubin sha256]}, "launches": [...]},
    #: "unchanged": bool} (rules/provenance.py); absent where the trace recorded no code
    provenance: dict[str, Any] | None = None
    #: the verdict's runs, wall time (s) and x one plain run (results.Cost); absent before 2026-12-02
    cost: dict | None = None
    #: paired rounds that ran under foreign load (rules/load.py), and every round's load figures:
    #: {"under_load": [round index], "counted": [...], "code", "reason", "rounds": [{"runs": [RunLoad]}]}
    rounds_under_load: int | None = None
    load: dict[str, Any] | None = None
    #: verdict `conflict`: the BEST the candidate was judged against, and the newer BEST it overlaps
    judged_against: str | None = None
    best_commit: str | None = None
    #: the candidate's [correctness] command run (readers.test_summary.CorrectnessRun dumped: exit_code,
    #: wall_s, passed/failed/skipped/errors counts); absent where none ran
    correctness: dict[str, Any] | None = None


class Commit(_OnSlot):
    """A keep committed: attempt, new BEST_COMMIT `commit`, the `previous` one, metric per class,
    GPU time (us), whether formatting changed it, the re-measure's classes, its performance.md
    `rows`; `recovered` when a restart adopted it; `overtaken_rounds`, the commit rounds overtaken
    before it. (`attempt` is None only in the not-yet-written
    record commit_improvement renders performance.md from.)"""

    required = ("attempt", "commit")
    event: Literal["commit"]
    attempt: int | None = None
    commit: str = ""
    previous: str = ""
    metrics: dict[str, float] = {}
    gpu_us: float | None = None
    formatted: bool | None = None
    classes: list[ClassChange] = []
    rows: list[PerfRow] = []
    recovered: bool = False
    #: the BEST_COMMIT the candidate was judged against, when another slot moved BEST before this
    #: commit and the candidate was re-applied onto the newest BEST and re-measured
    reapplied_from: str | None = None
    #: earlier commit rounds another slot's commit overtook during their re-measure (0 in ledgers
    #: written before this field)
    overtaken_rounds: int = 0
    #: why it was committed or refused, stable (kopt_mcp.rules.decision.Code: still_better, confirmed,
    #: unconfirmed, script_only, ...); absent in records written before commit codes existed
    code: str | None = None
    #: the re-measure's runs, wall time (s) and x one plain run (results.Cost); absent before 2026-12-02
    cost: dict | None = None


class CommitRefused(_OnSlot):
    """commit_improvement did not commit attempt `attempt`: why, and where its patch is archived."""

    required = ("attempt", "reason")
    event: Literal["commit_refused"]
    attempt: int | None = None
    #: why, stable (kopt_mcp.rules.decision.Code); absent in records written before commit codes existed
    code: str | None = None
    reason: str = ""
    patch: str | None = None
    #: the re-measure's runs, wall time (s) and x one plain run (results.Cost); absent before 2026-12-02
    cost: dict | None = None


class Revert(_OnSlot):
    """revert_to_best: the caller's reason, the archived patch (None: nothing to archive), the
    changed files and the attempt number the archive took (None when nothing changed)."""

    event: Literal["revert"]
    reason: str = ""
    archived: str | None = None
    changed: list[str] = []
    attempt: int | None = None


class Stopped(_Event):
    """The session stopped: reason, BEST_COMMIT, and the Stop Summary text of performance.md."""

    required = ("reason",)
    event: Literal["stopped"]
    slot: str | None = None  # with candidate slots: the slot whose regressions stopped (None: the session)
    reason: str = ""
    best_commit: str = ""
    summary: str | None = None


class Recovered(_Event):
    """Recovery finished or undid the job a killed server left (`job`: its in-progress marker)."""

    required = ("action",)
    event: Literal["recovered"]
    slot: str | None = None  # with candidate slots: the slot whose job was recovered
    job: dict[str, Any] = {}
    action: str = ""
