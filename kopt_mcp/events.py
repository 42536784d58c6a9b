"""Typed ledger events: one pydantic model per event kind, one writer check, one reader.

Every line of `ledger.jsonl` is one event: `at` (UTC, ISO 8601), `event` (its kind), `id`, `prev`
(the hash chain, see kopt_mcp.ledger) and the kind's own fields. `EVENTS` maps each kind to its model;
`Event` is their union, discriminated on `event`, plus `Other`.

Writing (`ledger.new_record`, `Referee.record`, `Store.log`) goes through `check_record`:

- the kind must be in `EVENTS` (else LedgerEventError: register the model here first);
- every field is checked against the model in strict mode (a str is no number, a number no str);
- a top-level field the model does not declare is refused (`extra="forbid"`): a typo or a new
  field nobody declared is a bug in the writer, caught in the first test that writes it;
- the fields in the model's `required` must be given.

The one exception is `Store.log` with a kind that is NOT in `EVENTS`: a free-form diagnostic
(`Other`), checked only for being JSON. Nothing decides on those; every kind kopt_mcp itself
writes is registered (tests/test_events.py scans the source for them).

Nested payloads that are dumps of other modules' models (a class's change, the keep decision, the
device, a kernel row, the bottleneck) are typed on the fields readers use and allow the others
(`extra="allow"`): their producers own their shape.

Reading (`parse_event`, `as_events`, `Store.events()`) never raises and reads every version of the
ledger: fields a record lacks take their defaults (None, "", []), fields this version does not
declare are ignored (they stay in the file), a kind not in `EVENTS` reads as `Other`, and a record
that does not fit its model (edited by hand) reads as `Other` with `misfit` saying why. Readers
select events with `isinstance` (or `last(events, Trace)`), never by `.get()` on dicts.

Units: times and GPU time in us unless the field name says otherwise (`waited_s`, `cold_s`: s);
changes in % with + = better; metric values in the benchmark's own unit.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import PurePath
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union, get_args

from pydantic import BaseModel, ConfigDict, Discriminator, Tag, ValidationError, model_validator

from kopt_mcp.errors import LedgerEventError
from kopt_mcp.rules.decision import AttemptVerdict


# -- nested payloads (their producers own the full shape) -------------------------------------


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class PerfRow(BaseModel):
    """One row of performance.md. Metric and GPU time per class are joined into one cell."""

    date: str
    commit: str
    status: str
    command: str
    target: str
    kernel: str
    metric: str
    gpu_time: str
    change: str
    explanation: str


class ClassChange(_Payload):
    """One config class in a verdict (rules.script.ClassDelta dumped): metric of BEST and the
    candidate, change per round and its mean (%, + = better; None against a zero metric)."""

    key: str
    best: float | None = None
    candidate: float | None = None
    deltas_pct: list[float | None] = []
    mean_pct: float | None = None


class GpuKeep(_Payload):
    """The keep decision of an attempt (rules.keep_totals.KeepDecision dumped): GPU time (us) of BEST
    and the candidate, change in % (+ = better)."""

    kept: bool | None = None
    gpu_best_us: float | None = None
    gpu_candidate_us: float | None = None
    gpu_delta_pct: float | None = None
    metric_used: str | None = None
    reason: str = ""


class DeviceRecord(_Payload):
    """The device of the baseline (results.DeviceInfo dumped)."""

    vendor: str = ""
    index: int | None = None
    name: str = ""


class KernelLine(_Payload):
    """One kernel of a trace (hottest first): launches, GPU time (us), share of the run (%),
    registers per thread, shared memory per block (bytes); vendor metrics as extra fields."""

    name: str
    calls: int | None = None
    total_us: float | None = None
    avg_us: float | None = None
    median_us: float | None = None
    share_pct: float | None = None
    registers_per_thread: int | None = None
    shared_mem_per_block_bytes: int | None = None


class FunctionLine(_Payload):
    """One sampled Python function of a CPU trace (hottest first): where, and its self and total share
    of the samples (%)."""

    function: str
    file: str = ""
    line: int | None = None
    self_pct: float | None = None
    total_pct: float | None = None


class BottleneckRecord(_Payload):
    """The bottleneck class of a trace's target kernel (profilers.bottleneck.Bottleneck dumped)."""

    kind: str
    evidence: dict[str, float] = {}
    reason: str = ""


class FileChangeRecord(_Payload):
    """One file a run changed in its checkout (rules.protect.FileChange)."""

    kind: str
    path: str


# -- events -------------------------------------------------------------------------------------


class _Event(BaseModel):
    """Fields every record has. `id` and `prev` are absent in ledgers written before the hash
    chain (None when read)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: fields a writer must give (checked when written, not when read: old ledgers may lack them)
    required: ClassVar[tuple[str, ...]] = ()

    at: str = ""
    id: str | None = None
    prev: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _ignore_unknown_when_reading(cls, data: Any, info) -> Any:
        if isinstance(data, dict) and isinstance(info.context, dict) and info.context.get("read"):
            return {k: v for k, v in data.items() if k in cls.model_fields}
        return data


class _OnSlot(_Event):
    """A record of one run or attempt: the candidate slot it belongs to and the device it ran on
    (e.g. "nvidia:0:GPU-<uuid>"); None in single-slot sessions and older ledgers."""

    slot: str | None = None
    device: str | None = None


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


# -- diagnostic events (Store.log: no state change goes with them) ------------------------------


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


class GpuGate(_OnSlot):
    """find_idle_gpu: leased or not, why not, time waited (s)."""

    event: Literal["gpu_gate"]
    leased: bool | None = None
    reason: str | None = None
    waited_s: float | None = None


class LeaseHeld(_OnSlot):
    """One measuring call's job lease, written when it ends: the device (`device`, e.g.
    "nvidia:0:GPU-<uuid>"), how long the gate waited for it (`waited_s`, s) and when it was held
    (`held_from`, `held_until`: epoch s). Two records of one device whose spans overlap are a double
    booking; the waits per slot show whether slots shared the GPUs fairly
    (benchmarks/slots_gpu/many.py reads both)."""

    event: Literal["job_lease"]
    waited_s: float | None = None
    held_from: float | None = None
    held_until: float | None = None


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


class BestMoved(_Event):
    """Another candidate slot moved BEST (the serialized commit step): this slot follows it from
    `previous` to `best_commit`; `by` names the slot that committed, `action` what happened to this
    slot's workspace (edits re-applied, or archived as `conflict`)."""

    required = ("best_commit",)
    event: Literal["best_moved"]
    previous: str = ""
    best_commit: str = ""
    by: str | None = None
    action: str = ""


class DeviceLost(_Event):
    """A job lease's device or node was lost mid-call (kopt_mcp.errors.DeviceLost): `retrying` on a new
    lease, or not (the call then ends `failed`)."""

    event: Literal["device_lost"]
    device: str | None = None
    error: str = ""
    retrying: bool | None = None


class BenchmarkOutputs(_Event):
    """Tracked files a run of unchanged BEST_COMMIT writes: `added` now, all `outputs` so far."""

    event: Literal["benchmark_outputs"]
    added: list[str] = []
    outputs: list[str] = []


class CancelledOp(_Event):
    """The client cancelled `operation` (the process tree was killed, the lease released)."""

    event: Literal["cancelled"]
    operation: str = ""


class LeftoversEnded(_Event):
    """Runs a killed server left running (their pids) were ended at start."""

    event: Literal["leftovers_ended"]
    pids: list[int] = []
    note: str = ""


class StaleGitLocksRemoved(_Event):
    """Git lock files a killed git process left were removed at start."""

    event: Literal["stale_git_locks_removed"]
    paths: list[str] = []


class StateRestored(_Event):
    """A run changed the session's state folder and the referee put it back (referee/state_guard.py):
    `changes` (kind, path relative to the state folder, or a ref name) and what was not restored
    exactly (`lost`)."""

    event: Literal["state_restored"]
    changes: list[FileChangeRecord] = []
    lost: list[str] = []


class StopSummaryCommitFailed(_Event):
    """The Stop Summary could not be committed (the git error)."""

    event: Literal["stop_summary_commit_failed"]
    error: str = ""


class Other(BaseModel):
    """A record of a kind not in EVENTS (a free-form diagnostic, or a kind of another version), or
    one that does not fit its model (`misfit` says why). Its fields are kept as extra fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    event: Any = None
    at: Any = ""
    id: Any = None
    prev: Any = None
    misfit: str | None = None


TYPED = (SessionStarted, Baseline, Attempt, Commit, CommitRefused, Revert, Stopped, Recovered, Snapshot,
         RunBenchmark, BaselineFailed, Trace, Warmup, GpuGate, LeaseHeld, Confirmation, SessionGain, BestMoved, DeviceLost, BenchmarkOutputs, CancelledOp, LeftoversEnded,
         StaleGitLocksRemoved, StateRestored, StopSummaryCommitFailed)
#: event kind -> its model
EVENTS: dict[str, type[_Event]] = {get_args(m.model_fields["event"].annotation)[0]: m for m in TYPED}


def _kind(v: Any) -> str:
    kind = v.get("event") if isinstance(v, dict) else getattr(v, "event", None)
    return kind if isinstance(kind, str) and kind in EVENTS else "other"


#: one ledger event: the typed model of its kind, or Other
_MEMBERS = tuple(Annotated[m, Tag(k)] for k, m in EVENTS.items()) + (Annotated[Other, Tag("other")],)
Event = Annotated[Union[_MEMBERS], Discriminator(_kind)]  # noqa: UP007 -- the members come from EVENTS

E = TypeVar("E", bound=BaseModel)


# -- writing ----------------------------------------------------------------------------------


def _jsonable(v: Any) -> Any:
    """json.dumps' fallback for the few non-JSON values writers pass: paths, pydantic models."""
    if isinstance(v, PurePath):
        return str(v)
    if isinstance(v, BaseModel):
        return v.model_dump(mode="json")
    if isinstance(v, (set, frozenset)):
        return sorted(v)
    raise TypeError(f"{type(v).__name__} is not JSON: pass a str, number, bool, list or dict")


def check_record(record: dict, free_form: bool = False) -> dict:
    """`record` (with `event`) as the JSON-ready dict the ledger stores, after checking it against
    its kind's model (see the module docstring). `free_form`: a kind not in EVENTS is accepted as a
    diagnostic (Store.log). Raises LedgerEventError naming the kind and the bad field."""
    kind = record.get("event")
    try:
        line = json.dumps(record, default=_jsonable)
    except (TypeError, ValueError) as e:
        raise LedgerEventError(f"ledger event {kind!r}: a field is not JSON ({e})") from e
    model = EVENTS.get(kind) if isinstance(kind, str) else None
    if model is None:
        if free_form and isinstance(kind, str) and kind:
            return json.loads(line)
        raise LedgerEventError(f"unknown ledger event {kind!r}: declare its model in kopt_mcp/events.py "
                               f"(EVENTS), or write a free-form diagnostic with Store.log")
    missing = [f for f in model.required if f not in record]
    if missing:
        raise LedgerEventError(f"ledger event {kind!r} lacks required field(s) {', '.join(missing)}")
    try:
        model.model_validate_json(line, strict=True)
    except ValidationError as e:
        bad = "; ".join(f"{'.'.join(map(str, x['loc'])) or '(record)'}: {x['msg']}" for x in e.errors()[:5])
        raise LedgerEventError(f"ledger event {kind!r} does not fit {model.__name__}: {bad}") from e
    return json.loads(line)


# -- reading ----------------------------------------------------------------------------------


def parse_event(raw: Any) -> BaseModel | None:
    """One ledger record (a dict as read from the file, or an event already parsed) as its typed
    event, `Other` for an unregistered kind or a record that does not fit (with `misfit`), or
    None when `raw` is no record at all (not a dict). Never raises."""
    if isinstance(raw, BaseModel):
        return raw
    if not isinstance(raw, dict):
        return None
    model = EVENTS.get(raw.get("event")) if isinstance(raw.get("event"), str) else None
    if model is None:
        return _other(raw)
    try:
        return model.model_validate(raw, context={"read": True})
    except ValidationError as e:
        bad = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:3])
        return _other({**raw, "misfit": f"does not fit {model.__name__}: {bad}"})


def _other(raw: dict) -> Other:
    try:
        return Other.model_validate(raw)
    except ValidationError as e:  # a `misfit` field of another type, keys that are no names
        return Other(event=raw.get("event"), misfit=f"unreadable record: {e.errors()[0]['msg']}")


def as_events(records: Iterable[Any] | None) -> list:
    """`parse_event` of each record, oldest first; entries that are no record are skipped."""
    return [e for e in map(parse_event, records or []) if e is not None]


def last(events: Iterable[Any], kind: type[E]) -> E | None:
    """The newest event of model `kind` (e.g. `Trace`) among `events` (oldest first), or None."""
    found = None
    for e in events:
        if isinstance(e, kind):
            found = e
    return found
