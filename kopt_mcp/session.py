"""The session's state machine (pure: no subprocess, no git, no MCP).

Phases and the tools each allows (anything else is refused with what to call instead):

    needs_baseline --run_benchmark (records the baseline)--> ready
    ready          --save_and_test--> ready (tie/regressed/failed/divergent/rejected: reverted)
                                    | repairing (incorrect: stays in place) | improved | stopped
    repairing      --save_and_test--> (as ready; a still-incorrect tree uses one repair; the last
                                      one abandons it) ; --revert_to_best--> ready
    improved       --commit_improvement--> ready (BEST_COMMIT moves) ; --revert_to_best--> ready
    stopped        terminal: candidate tools refuse with the stop reason
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import Literal

from pydantic import BaseModel, Field

from kopt_mcp.errors import SessionError
from kopt_mcp.evidence.confirm import StoredTargetTime
from kopt_mcp.rules.decision import Verdict
from kopt_mcp.rules.percent import spread_pct
from kopt_mcp.rules.repair import RepairState
from kopt_mcp.rules.script import Round
from kopt_mcp.rules.stop import RegressionCounter, RegressionNote

#: groups of repeated BEST runs (one per lease) kept for the noise estimate of rules/stats.py
NOISE_GROUPS_KEPT = 20



class Phase(str, Enum):
    needs_baseline = "needs_baseline"
    ready = "ready"
    repairing = "repairing"
    improved = "improved"
    stopped = "stopped"


class Best(BaseModel):
    """What BEST_COMMIT measured last: per-class script metric and profiler GPU time (us)."""

    commit: str
    metrics: dict[str, float] = Field(default_factory=dict)
    gpu_us: float | None = None
    kernels: list[str] = Field(default_factory=list)
    #: the whole operation's GPU time (us per invocation, summed over the target units), where known
    op_us: float | None = None


class VerdictSummary(BaseModel):
    """The numbers of the save_and_test verdict that ruled a candidate `improved`, carried to its
    commit message: paired `rounds`, the target's mean change and its one-sided lower bound (%,
    + = better; rules.stats.PairedInterval; `target_lo_pct` None while the noise was not
    measurable), each config class's mean change (%), and where profiler GPU time decided the keep,
    BEST's and the candidate's GPU time (us) and the gain (%, + = less GPU time: the keep
    decision's `gpu_delta_pct`)."""

    rounds: int
    target_pct: float
    target_lo_pct: float | None = None
    #: the one-sided confidence of `target_lo_pct` (0.995 = 99.5%)
    confidence: float | None = None
    classes_pct: dict[str, float] = Field(default_factory=dict)
    gpu_best_us: float | None = None
    gpu_candidate_us: float | None = None
    gpu_gain_pct: float | None = None
    #: the GPU-time gain's one-sided lower bound (%) in the keep decision (KeepDecision lower_bound_pct)
    gpu_lo_pct: float | None = None
    #: the whole operation's GPU-time gain (%, + = less), where the keep was judged by harness unit
    op_gain_pct: float | None = None
    #: per config class, where the keep was judged by harness unit: the target kernels' GPU-time gain and the
    #: whole operation's (%, + = less GPU time; rules.units.class_sums), the figures that decided the keep
    classes_gpu_pct: dict[str, float] = Field(default_factory=dict)
    classes_op_pct: dict[str, float] = Field(default_factory=dict)


class PendingImprovement(BaseModel):
    """An `improved` candidate waiting for commit_improvement: the exact tree that was tested."""

    attempt: int
    tree: str
    target: str
    hypothesis: str
    candidate_metrics: dict[str, float]
    candidate_gpu_us: float | None
    #: the candidate's GPU time per config class (us, median launch of its launch groups) where the
    #: profiled launch groups map to the classes (rules.keep.class_gpu_times), for performance.md
    candidate_class_gpu_us: dict[str, float] | None = None
    #: the candidate's whole-operation GPU time per config class and in total (us per invocation, every
    #: non-utility kernel), where the keep was judged by harness unit: performance.md shows it beside
    candidate_class_op_us: dict[str, float] | None = None
    candidate_op_us: float | None = None
    kernels: list[str]
    target_delta_pct: float
    metric_used: str
    #: the BEST_COMMIT it was judged against (None in states saved before this field existed): when
    #: BEST has moved since, commit_improvement re-applies it onto the newest BEST and re-measures
    base: str | None = None
    #: BEST's GPU time (us) in the keep decision and the GPU-time floor (%) its gain cleared: the
    #: claim the commit's out-of-process confirmation checks (referee.confirmation.confirm_keep)
    gpu_best_us: float | None = None
    gpu_floor_pct: float | None = None
    #: the keep was judged on the injector's marked harness units: the confirmation measures per unit
    gpu_by_unit: bool = False
    #: the run folder of the verdict's last counted candidate run: its `[commit] include` files are
    #: committed where the verdict stands without a re-measure (rules/commit.py verdict_stands)
    candidate_run_dir: str = ""
    #: the candidate's script-metric runs in its attempt's lease (class -> metric, in order): once this
    #: very tree is committed they are repeated runs of the new BEST, the first noise group at its level
    candidate_run_metrics: list[dict[str, float]] = Field(default_factory=list)
    #: the verdict's numbers for the commit message (None in states saved before this field existed)
    verdict: VerdictSummary | None = None
    #: only the script metric decided the verdict (no profiler; code script_only), on a device of
    #: `vendor` ("cpu", "nvidia", ...): commit_improvement applies rules.script_only.script_only_commit
    script_only: bool = False
    vendor: str = ""
    #: the script-metric rounds the verdict counted ({"best": {class: value}, "candidate": {...}} each):
    #: a script-metric keep's commit re-measure is judged together with them by the verdict's rule
    verdict_rounds: list[Round] = Field(default_factory=list)


class TieCandidate(BaseModel):
    """The latest `tie` verdict's candidate, which commit_improvement(neutral_reason=...) may keep as
    neutral (rules/commit.py neutral_keep): its attempt, the exact tested tree, the BEST_COMMIT it was
    judged against, target and hypothesis, the verdict's per-class changes (ClassDelta dumps: mean %
    + = better, ratio, interval), the target's mean change (%) and the candidate's runs (class -> metric)."""

    attempt: int
    tree: str
    base: str
    target: str
    hypothesis: str
    classes: list[dict] = Field(default_factory=list)
    target_pct: float | None = None
    candidate_run_metrics: list[dict[str, float]] = Field(default_factory=list)


class LastVerdict(BaseModel):
    """The latest verdict, for status. `commit`: what commit_improvement then did with an `improved`
    verdict ("refused": not committed, the candidate reverted; None: nothing yet, or committed, when
    BEST_COMMIT moved), `commit_code` its code (kopt_mcp.rules.decision.Code) and `reason` its words."""

    attempt: int
    verdict: Verdict
    target: str
    reason: str
    commit: Literal["refused"] | None = None
    commit_code: str | None = None


class SessionState(BaseModel):
    """Everything needed to resume exactly where the server was (saved atomically after each step)."""

    version: int = 1
    tag: str
    branch: str
    repo: str
    workspace: str
    best_worktree: str
    config_path: str
    config_sha256: str
    phase: Phase = Phase.needs_baseline
    best: Best
    next_attempt: int = 1
    regressions: RegressionCounter = Field(default_factory=RegressionCounter)
    repair: RepairState | None = None
    pending: PendingImprovement | None = None
    last: LastVerdict | None = None
    kept: int = 0
    #: of `kept`, the keeps only the script metric decided (PendingImprovement.script_only)
    kept_script_only: int = 0
    #: neutral keeps (a `tie` kept by name: rules/commit.py neutral_keep), not in `kept`: never a gain
    kept_neutral: int = 0
    #: the latest verdict's candidate where it was a `tie` (None otherwise): what a neutral keep commits
    tie: TieCandidate | None = None
    stop_reason: str | None = None
    stopped_at: str | None = None
    in_progress: dict | None = None
    #: ledger records of the transition this state ends (written with it in one atomic save, then
    #: appended to the ledger and cleared; a restart appends those the ledger lacks, by record id)
    outbox: list[dict] = Field(default_factory=list)
    noise_history: list[list[dict[str, float]]] = Field(default_factory=list)
    #: how many of the latest noise_history groups are runs of BEST_COMMIT's own tree: BEST's record
    #: (rules/best_record.py); 0 after BEST moved without runs of its tree (a re-applied keep, another slot)
    best_groups: int = 0
    #: spreads (%) between two profiled runs of unchanged BEST_COMMIT taken seconds apart in one
    #: lease (the baseline's pair, each attempt's BEST before and after the candidate), latest last
    #: (rules.floor.gpu_gain_floor)
    gpu_spreads_pct: list[float] = Field(default_factory=list)
    #: True once two profiled runs of unchanged BEST_COMMIT launched a target launch group a different
    #: number of times (a time-driven harness: do_bench and the like); it never turns False, since
    #: two runs of such a harness can happen to launch as often (rules.keep.judge_groups `time_driven`)
    launch_counts_vary: bool = False
    #: the wall time (s) of one plain run of the benchmark (the baseline's median run), the unit a
    #: verdict's and a commit's cost is counted in (results.Cost); None before the baseline
    plain_run_s: float | None = None
    #: files (repo-relative) that the unchanged benchmark writes itself (seen changed after a run of
    #: BEST_COMMIT): ignored by the post-run check and the diff guard, never committed (a commit
    #: keeps BEST's version). A protected file is never one.
    benchmark_outputs: list[str] = Field(default_factory=list)
    #: the last confirmed commit's out-of-process measurement of its tree (referee/confirmation.py):
    #: BEST's figure at the next confirmation where still valid (rules/confirm.py reusable_best)
    confirmed_tree: StoredTargetTime | None = None

    # -- phase transitions (the referee calls these; it never assigns phase or counters itself) --

    def begin_job(self, tool: str, **fields: object) -> None:
        """Mark a job as in progress (`tool`, when it started, `fields` such as the attempt): saved
        before the job's first git step, so a killed server's recovery knows what to undo."""
        self.in_progress = {**({"attempt": fields.pop("attempt")} if "attempt" in fields else {}),
                            "tool": tool, "since": _now(), **fields}

    def end_job(self) -> None:
        """The job is over (its result is saved in the same atomic write)."""
        self.in_progress = None

    def new_attempt(self) -> int:
        """Take the next attempt number (1, 2, ...) and return it."""
        n = self.next_attempt
        self.next_attempt += 1
        return n

    def baseline_recorded(self, metrics: dict[str, float], gpu_us: float | None, kernels: list[str]) -> None:
        """The baseline of BEST_COMMIT was measured: BEST's per-class metrics and GPU time (us) are
        set and the phase moves from needs_baseline to ready. Raises SessionError in another phase."""
        if self.phase != Phase.needs_baseline:
            raise SessionError(f"the baseline is recorded once, in phase needs_baseline (phase {self.phase.value})")
        self.best.metrics, self.best.gpu_us, self.best.kernels = dict(metrics), gpu_us, list(kernels)

    def baseline_committed(self, commit: str) -> None:
        """The baseline's performance.md is committed as `commit`: BEST_COMMIT moves there, phase ready."""
        self.best.commit = commit
        self.phase = Phase.ready
        self.in_progress = None

    def dropped_candidate(self) -> None:
        """The candidate left the workspace (reverted, abandoned, interrupted, not kept): a repair or
        a pending improvement is dropped and the phase returns to ready (needs_baseline and
        stopped stay as they are)."""
        if self.phase in (Phase.repairing, Phase.improved):
            self.phase = Phase.ready
        self.repair, self.pending = None, None

    def repairing(self, repair: RepairState) -> None:
        """An `incorrect` verdict: the candidate stays in place under repair (`repair`: the attempt
        that first failed and the repairs used)."""
        self.repair, self.phase = repair, Phase.repairing

    def improved(self, pending: PendingImprovement) -> None:
        """An `improved` verdict: `pending` (the exact tested tree) waits for commit_improvement."""
        self.pending, self.repair, self.phase = pending, None, Phase.improved

    def regressed(self, note: RegressionNote) -> None:
        """A `regressed` verdict: the consecutive-regression counter +1, `note` joins its window."""
        self.regressions = self.regressions.regressed(note)

    def reset_regressions(self) -> None:
        """A verdict or commit that resets the consecutive-regression counter (its window stays)."""
        self.regressions = self.regressions.reset()

    def ruled(self, attempt: int, verdict: Verdict, target: str, reason: str, tie: TieCandidate | None = None) -> None:
        """Remember the latest verdict (for status) and, for a `tie`, its candidate (`tie`)."""
        self.last = LastVerdict(attempt=attempt, verdict=verdict, target=target, reason=reason)
        self.tie = tie if verdict == "tie" else None

    def adopted(self, commit: str, metrics: dict[str, float], gpu_us: float | None, neutral: bool = False) -> str:
        """A keep was committed as `commit`: BEST_COMMIT moves there with its metrics (GPU time in
        us), the pending improvement is done, counters reset, `kept` +1 (and `kept_script_only` for a
        script-only one); a `neutral` keep counts in `kept_neutral` instead. Returns the old BEST_COMMIT."""
        old = self.best.commit
        self.tie = None
        if neutral:
            self.best.commit, self.best.metrics, self.best.gpu_us = commit, dict(metrics), gpu_us
            self.kept_neutral += 1
            return old
        self.kept_script_only += int(bool(self.pending and self.pending.script_only))
        self.best.commit, self.best.metrics, self.best.gpu_us = commit, dict(metrics), gpu_us
        self.phase, self.pending, self.repair = Phase.ready, None, None
        self.reset_regressions()
        self.kept += 1
        return old

    def best_moved(self, commit: str, metrics: dict[str, float], gpu_us: float | None, kernels: list[str]) -> None:
        """Another candidate slot moved the session's BEST to `commit` (with its metrics, GPU time in
        us and target kernels): this slot judges against it from now on; a slot still waiting for
        the baseline is ready (the session's baseline exists). Its own counters are untouched."""
        self.best = Best(commit=commit, metrics=dict(metrics), gpu_us=gpu_us, kernels=list(kernels))
        self.best_groups = 0  # the runs this slot remembers are of the older BEST
        if self.phase == Phase.needs_baseline:
            self.phase = Phase.ready

    def commit_refused(self, code: str = "", reason: str = "") -> None:
        """commit_improvement did not keep the pending candidate (reverted): phase ready, counter reset;
        the latest verdict says it was refused, with `code` and `reason` (status shows the refused
        state, never `improved`)."""
        if self.last is not None and self.pending is not None and self.last.attempt == self.pending.attempt:
            self.last = self.last.model_copy(update={"commit": "refused", "commit_code": code or None,
                                                     "reason": reason or self.last.reason})
        self.dropped_candidate()
        self.in_progress = None
        self.reset_regressions()

    def stopped_now(self, reason: str) -> bool:
        """Stop the session with `reason` (terminal). Returns False when it had stopped already."""
        if self.phase == Phase.stopped:
            return False
        self.phase, self.stop_reason, self.stopped_at = Phase.stopped, reason, _now()
        return True

    def record_gpu_spread(self, first_us: float, second_us: float, keep: int = NOISE_GROUPS_KEPT) -> float:
        """Remember the spread between two adjacent profiled runs of BEST_COMMIT (target GPU time,
        us, both > 0): |first - second| / mean * 100 joins `gpu_spreads_pct` (the latest `keep`).
        Returns that spread (%). Raises ValueError if a time is not positive."""
        return self.record_spread_pct(spread_pct(first_us, second_us), keep)

    def record_spread_pct(self, pct: float, keep: int = NOISE_GROUPS_KEPT) -> float:
        """Remember a spread (%) measured directly between two adjacent profiles of BEST_COMMIT (the
        launch-group spread of rules.keep.group_spread_pct / judge_groups). Returns it. Raises
        ValueError for a negative or non-finite spread."""
        if not (pct >= 0.0 and pct != float("inf")):
            raise ValueError(f"a spread must be a finite percentage >= 0, got {pct}")
        self.gpu_spreads_pct = [*self.gpu_spreads_pct, float(pct)][-keep:]
        return float(pct)

    def record_best_runs(self, runs: list[dict[str, float]], keep: int = NOISE_GROUPS_KEPT,
                         new_best: bool = False) -> None:
        """Remember one lease's repeated BEST runs (class -> metric) for the noise estimate;
        a single run adds nothing; only the latest `keep` groups are kept. `new_best`: the runs are
        of a tree that just became BEST_COMMIT (a keep), the first group of its record."""
        added = len(runs) >= 2
        if added:
            self.noise_history = [*self.noise_history, [dict(r) for r in runs]][-keep:]
        self.best_groups = min(len(self.noise_history), (0 if new_best else self.best_groups) + int(added))

    def best_record(self) -> list[list[dict[str, float]]]:
        """The noise_history groups of BEST_COMMIT's own tree, oldest first (BEST's record check)."""
        return self.noise_history[len(self.noise_history) - self.best_groups:] if self.best_groups else []


def _now() -> str:
    """UTC time, ISO 8601 to the second (as ledger.now_iso)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


_ALLOWED: dict[str, set[Phase]] = {
    "save_and_test": {Phase.ready, Phase.repairing},
    "commit_improvement": {Phase.improved},
    "revert_to_best": {Phase.ready, Phase.repairing, Phase.improved, Phase.needs_baseline},
    "run_benchmark": {Phase.needs_baseline, Phase.ready, Phase.repairing, Phase.improved},
    "kernel_trace_analysis": {Phase.needs_baseline, Phase.ready, Phase.repairing, Phase.improved},
    "warm_up_harness": {Phase.needs_baseline, Phase.ready, Phase.repairing, Phase.improved},
    "find_idle_gpu": {Phase.needs_baseline, Phase.ready, Phase.repairing, Phase.improved},
}

_HINT = {
    Phase.needs_baseline: "call run_benchmark first: it measures unmodified BEST_COMMIT as the baseline",
    Phase.improved: "the last candidate was improved: call commit_improvement to keep it, or revert_to_best to drop it",
    Phase.ready: "edit the kernel in the workspace, then call save_and_test",
    Phase.repairing: "fix the incorrect candidate in place and call save_and_test, or revert_to_best to give up",
}


def require(state: SessionState, tool: str) -> None:
    """Raise SessionError unless `tool` may run in the current phase; the text says what to do."""
    if state.phase == Phase.stopped:
        raise SessionError(
            f"the session stopped ({state.stop_reason}) at {state.stopped_at}; BEST_COMMIT is "
            f"{state.best.commit[:12]}. Start a new session (kopt-mcp serve --tag NEW) to go on"
        )
    if state.phase not in _ALLOWED[tool]:
        raise SessionError(f"{tool} is not allowed now (phase {state.phase.value}): {_HINT[state.phase]}")


def next_actions(state: SessionState) -> list[str]:
    """The tools that make progress from the current phase, most useful first."""
    return {
        Phase.needs_baseline: ["run_benchmark"],
        Phase.ready: ["save_and_test", "kernel_trace_analysis", "run_benchmark"],
        Phase.repairing: ["save_and_test", "revert_to_best"],
        Phase.improved: ["commit_improvement", "revert_to_best"],
        Phase.stopped: [],
    }[state.phase]
