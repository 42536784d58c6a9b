"""The referee's values: a `Session` (state, store, repository, config, services, device) and its
commit point. The operations are plain functions over a Session, one module per responsibility:

    opening.py   open or resume a session (locks, refusals, state, BEST worktree, GPU gate)
    recovery.py  settle / recover a half-done job, adopt a new BEST, stop (Stop Summary)
    ops.py       status, find_idle_gpu, run_benchmark, trace, warm-up, revert, get_attempt
    baseline.py  the baseline of unmodified BEST_COMMIT
    attempt.py   save_and_test over an explicit `Attempt` record (keep_metric.py: the profiled A/B/A)
    commit.py    commit_improvement (the serialized commit step; reapply.py: onto a newer BEST)
    slots.py     candidate slots: several agents on one session and one BEST line

`Referee` (referee/__init__.py) is the Session with the operations as methods, each serialized by
`lock` and cancellable (`operation`). Phase changes are methods of `SessionState` (kopt_mcp.session).

Where things are. The workspace (`<repo>/.kopt/worktrees/<tag>`, git-excluded) is where the agent
edits; the session's files (state.json, ledger.jsonl, attempts/, runs/) live in its state folder
`<git-common-dir>/kopt/<tag>/`, out of every tree a benchmark runs in, and the server lock is
`<git-common-dir>/kopt/server.lock`: one session per git repository, keyed by its COMMON git dir,
so a server started on a worktree of the repository (the workspace itself) is refused.

Crash consistency: one commit point per transition. A transition's ledger records are not written
to the ledger directly: `record()` queues them in `state.outbox`, and `save()` writes state.json
(phase, counters, verdict AND the queued records) in one atomic rename. That rename is the commit
point. Only then are the records appended to the hash-chained ledger, and dropped from the outbox.
So a kill

- before the commit point leaves the old state, with the job's `in_progress` marker (saved when
  the job started): recovery (recovery.recover) undoes or finishes the job and records what it did.
  No record of the unfinished transition reached the ledger, so an `interrupted` record never
  contradicts a verdict;
- after it leaves the new state with records the ledger may lack: recovery appends those whose
  `id` is not in the ledger yet (`flush_outbox`), exactly once.

Git steps inside a job (revert, commit, Stop Summary commit) happen before the commit point and are
either undone or adopted by recovery from what git shows. performance.md is never appended to:
`write_performance` renders it from the ledger (plus the records being committed) with
`ledger.render_performance`, so its rows always come from ledger records.

A failed save (disk full, read-only) changes nothing in memory: `save()` restores the state to what
state.json holds (the last successful save) and raises `StateSaveError`; an operation that finds a
job marker left by such a failure first recovers it, as a restart would. Recovery at start removes
stale git lock files in the session's own worktrees and never raises: what it cannot fix, and a
ledger whose hash chain does not verify, is listed in `problems` (shown by `status`).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import threading
import time
from collections.abc import Callable
from datetime import date
from pathlib import Path

import git

from kopt_mcp import vcs
from kopt_mcp.bench.executor import Executor, JobLease
from kopt_mcp.bench.measure import Measurement, Profiled
from kopt_mcp.config import ConfigFile, TargetConfig
from kopt_mcp.errors import Cancelled, LedgerEventError, RefereeError, StateSaveError
from kopt_mcp.evidence.trace import exact_names_regex
from kopt_mcp.gpus.gate import GateOutcome
from kopt_mcp.ledger import TIME_COLUMN_CPU, TIME_COLUMN_GPU, Store, atomic_write, new_record, render_performance
from kopt_mcp.paths import kopt_dir, session_dir
from kopt_mcp.profilers.base import Profiler
from kopt_mcp.referee.services import Services
from kopt_mcp.referee.slots import check_slot_name, shared_events
from kopt_mcp.referee.state_guard import guarded
from kopt_mcp.results import DeviceInfo
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.shadowing import ModuleNames
from kopt_mcp.session import SessionState
from kopt_mcp.testing import faults

Progress = Callable[[float, float, str], None]
BASELINE_MESSAGE = "kopt: baseline"
STOP_MESSAGE = "kopt: stop summary"


def default_tag() -> str:
    """Session tag from today's date, e.g. `2026-11-22`."""
    return date.today().isoformat()


def short(e: BaseException) -> str:
    """An exception as one line of at most 300 characters."""
    return " ".join(str(e).split())[:300]


class Session:
    """One optimization session on one repository, as values: paths, the git repository and
    workspace, the frozen `config`/`cfg`, the `state` (kopt_mcp.session.SessionState), its `store`,
    the `services`, the `executor` handing out job leases and the `device` of the latest one. Built by
    `opening.open_session`; the operations take it as their first argument.

    `lock` serializes operations; `cancel` is the running operation's cancel event; `problems`
    lists what recovery could not fix (shown by status)."""

    repo: git.Repo
    ws: git.Repo
    config: ConfigFile
    cfg: TargetConfig
    state: SessionState
    best_tree: git.Repo | None

    def __init__(self, repo: Path, config_path: Path | None = None, tag: str | None = None,
                 services: Services | None = None, slot: str | None = None) -> None:
        self.repo_path = repo.resolve()
        self.repo = vcs.open_repo(self.repo_path)
        self.tag = tag or default_tag()
        #: the candidate slot (None: the main one, on the BEST line's branch; referee/slots.py)
        self.slot = check_slot_name(slot) if slot else None
        name = f"{self.tag}@{self.slot}" if self.slot else self.tag
        self.branch = f"kopt-slot/{self.tag}/{self.slot}" if self.slot else f"kernel-opt/{self.tag}"
        self.ref_prefix = f"refs/kopt/{self.tag}/slots/{self.slot}" if self.slot else f"refs/kopt/{self.tag}"
        self.workspace_path = self.repo_path / ".kopt" / "worktrees" / name
        self.best_path = self.repo_path / ".kopt" / "worktrees" / f"{name}-best"
        self.config_path = (config_path or self.repo_path / "kopt.toml").resolve()
        self.services = services or Services()
        self.lock = threading.RLock()
        self.cancel = threading.Event()
        self.problems: list[str] = []
        self.device: DeviceInfo | None = None  # the device of the latest job lease
        self.executor: Executor | None = None  # set by opening.open_session
        self.job: JobLease | None = None  # this call's job lease
        self.job_outcome: GateOutcome | None = None
        self.job_since: float = 0.0  # when this call's job lease was granted (epoch s)
        self.last_device: str | None = None  # preferred at the next lease
        #: the benchmark interpreter's module names (bench/modules.py), asked once, at the first attempt
        self.module_names: ModuleNames | None = None
        cache = self.repo_path / ".kopt" / "cache"
        self.cache_dirs = {"TRITON_CACHE_DIR": str(cache / "triton"),
                           "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
                           "CUDA_CACHE_PATH": str(cache / "cuda"),
                           "MIOPEN_USER_DB_PATH": str(cache / "miopen")}
        vcs.ensure_excluded(self.repo)
        self.kopt_dir = kopt_dir(self.repo)
        self.state_dir = session_dir(self.repo, self.tag) / "slots" / self.slot if self.slot else \
            session_dir(self.repo, self.tag)
        self.pid_dir = self.kopt_dir / "pids"
        self.store = Store(self.state_dir)

    # -- commit point, outbox --------------------------------------------------------------

    def record(self, event: str, **fields) -> dict:
        """Queue a ledger record of the current transition; `save()` commits it with the state."""
        rec = new_record(event, **fields)
        self.state.outbox.append(json.loads(json.dumps(rec, default=str)))
        return self.state.outbox[-1]

    def save(self) -> None:
        """The commit point: write the state (with its queued ledger records) atomically, then
        append those records to the ledger. On OSError the in-memory state is rolled back to the
        last saved one and StateSaveError says what to do."""
        try:
            self.store.save_state(self.state)
        except OSError as e:
            self._rollback()
            raise StateSaveError(
                f"could not save the session state to {self.store.state_path} ({e}): nothing changed. Free "
                "disk space or fix the folder's permissions, then call again (the interrupted job is "
                "recovered first)") from e
        faults.point("state.after_save")
        self.flush_outbox()

    def _rollback(self) -> None:
        """Put the in-memory state back to the last saved one (in place: callers hold references)."""
        if self.store.last_saved is None:
            return
        saved = SessionState.model_validate({k: v for k, v in self.store.last_saved.items() if k != "ledger_anchor"})
        saved.outbox = [r for r in saved.outbox if not self.store.has_record(r.get("id", ""))]  # already appended
        for name in SessionState.model_fields:
            setattr(self.state, name, getattr(saved, name))

    def flush_outbox(self) -> None:
        """Append the committed records the ledger lacks (by `id`), then clear the outbox. A record
        that cannot be written stays queued (a problem is listed) and is retried at the next save."""
        for rec in list(self.state.outbox):
            if not self.store.has_record(rec.get("id", "")):
                try:
                    self.store.append(rec)
                except OSError as e:
                    self.problems.append(f"a ledger record ({rec.get('event')}) could not be appended ({e}); "
                                         "it stays queued in state.json and is retried at the next save")
                    return
            self.state.outbox.remove(rec)

    def write_performance(self, extra: list[dict] | None = None) -> None:
        """Render performance.md from the ledger, the queued records and `extra` records (the ones
        about to be committed) into the workspace (atomic)."""
        events = shared_events(self) + list(self.state.outbox) + list(extra or [])
        vendor = self.device.vendor if self.device is not None else None
        cpu = vendor == "cpu" or (vendor is None and self.cfg.gates.gpu_probe == "none")
        atomic_write(self.workspace_path / "performance.md", render_performance(
            events, self.cfg.benchmark.metric, TIME_COLUMN_CPU if cpu else TIME_COLUMN_GPU))

    # -- small helpers shared by the operations ---------------------------------------------

    def attempt_ref(self, n: int, suffix: str = "") -> str:
        """The hidden ref holding attempt `n`'s frozen snapshot (a commit whose parent is the
        BEST_COMMIT it was judged against)."""
        return f"{self.ref_prefix}/attempts/{n:04d}{suffix}"

    def check_branch(self) -> None:
        """Refuse to touch a workspace that was switched to another branch or detached."""
        head = self.ws.head
        ref = "detached HEAD" if head.is_detached else head.reference.path
        if ref != f"refs/heads/{self.branch}":
            raise RefereeError(
                f"the workspace {self.workspace_path} is on {ref}, not on {self.branch}: it was switched behind "
                f"the server's back and nothing there is reset. Check it out again with "
                f"`git -C {self.workspace_path} checkout {self.branch}`")

    def moved_head_warnings(self) -> list[str]:
        """A warning naming the commits made in the workspace since BEST_COMMIT, if any."""
        best, head = self.state.best.commit, vcs.head_sha(self.ws)
        if head == best:
            return []
        log = self.ws.git.log("--format=%h %s", f"{best}..{head}").splitlines()
        shown = "; ".join(log[:10]) + (f"; and {len(log) - 10} more" if len(log) > 10 else "")
        return [(f"HEAD moved to {head[:12]} behind the server's back (commit(s): {shown or 'none on top of BEST'}); "
                f"the candidate is judged as its whole difference from BEST_COMMIT {best[:12]}. A revert drops "
                "these commits from the branch (their diff is in the attempt's archived patch); a commit puts "
                "their content in one new commit on top of BEST_COMMIT")]

    # -- the job lease: one device for one measuring call (kopt_mcp.bench.executor) ----------------

    def lease(self, progress: Progress | None) -> GateOutcome:
        """Take the job lease for this measuring call (or keep the one it holds): every run of the
        call goes to that device (`measure`, `profile`), so A/B pairs share one GPU; the device
        used last is preferred. With none after the whole wait (`outcome.lease` None) the session
        must stop (reason `no idle GPU: ...`): `recovery.lease_or_stop` does so at once, save_and_test
        after its own clean-up. Raises Cancelled when the client cancelled the wait. The lease ends
        with the operation (`release_job`, called by referee.operation)."""
        if self.job is not None:
            return self.job_outcome
        grant = self.executor.acquire(progress=progress, cancel=self.cancel, prefer=self.last_device)
        outcome = grant.outcome
        if grant.lease is None:
            if outcome.reason == "cancelled":
                raise Cancelled("cancelled while waiting for an idle GPU")
            return outcome
        self.job, self.job_outcome, self.job_since = grant.lease, outcome, time.time()
        self.device = grant.lease.device
        self.last_device = getattr(grant.lease, "uuid", None) or grant.lease.device_id
        return outcome

    def release_job(self) -> None:
        """End this call's job lease (no-op without one) and log it (`job_lease`: device, wait, held
        span); the device stays in `device` for status. A ledger that cannot be written loses the
        record, never the release."""
        device, outcome = self.device_id, self.job_outcome
        job, self.job, self.job_outcome = self.job, None, None
        if job is None:
            return
        try:
            self.store.log("job_lease", slot=self.slot, device=device, waited_s=round(outcome.waited_s, 3) if outcome else None,
                           held_from=round(self.job_since, 3), held_until=round(time.time(), 3))
        except (OSError, LedgerEventError):
            pass  # informational: the lease must still be given back
        finally:
            job.release()

    def device_lost(self, error: Exception, retrying: bool) -> None:
        """The job lease's device went away (DeviceLost): log it, drop the lease and the preference
        for that device; the caller retries the whole measuring call once (`retrying`) or gives up."""
        self.store.log("device_lost", device=self.device_id, error=str(error)[:500], retrying=retrying)
        self.last_device = None
        self.release_job()

    @property
    def device_id(self) -> str | None:
        """The ledger's name of the device this call holds (`nvidia:0:<uuid>`), or None."""
        return self.job.device_id if self.job is not None else None

    def measure(self, tree: str, run_dir: Path, check: bool = True) -> Measurement:
        """One benchmark run of snapshot `tree` on this call's job lease (referee.measure); take the
        lease first (`lease`). Raises DeviceLost when the device went away, Tampered when the run
        changed the state folder (`state_guarded`)."""
        with self.state_guarded():
            return self.job.measure(self.cfg, self.ws, tree, run_dir, self.env(), check=check,
                                    base=self._best_tree_id(), cancel=self.cancel, pid_dir=self.pid_dir)

    def profile(self, profiler: Profiler, tree: str, run_dir: Path, check: bool = False) -> Profiled:
        """One profiled run of snapshot `tree` on this call's job lease (its results read too; `check`:
        the [correctness] command after it). Raises DeviceLost, Tampered."""
        with self.state_guarded():
            return self.job.profile(self.cfg, profiler, self.ws, tree, run_dir, self.env(), base=self._best_tree_id(),
                                    check=check, cancel=self.cancel, pid_dir=self.pid_dir)

    def state_guarded(self):
        """Around one run: the state folder sealed before and restored after it; a change is listed
        in `problems`, logged, and raises Tampered (referee/state_guard.py)."""
        return guarded(self.store, self.ws, self.ref_prefix, self.problems)

    def _best_tree_id(self) -> str | None:
        try:
            return vcs.tree_of(self.ws, self.state.best.commit)
        except (git.GitCommandError, ValueError):
            return None

    def env(self) -> dict[str, str]:
        """Environment for every benchmark run: the device binding and the shared JIT caches."""
        return {**(self.device.env if self.device else {}), **self.cache_dirs}

    @functools.cached_property
    def policy(self) -> Policy:
        """The rules' thresholds, built once from the frozen `[gates]` (kopt_mcp/rules/policy.py);
        `policy.screen()` where a per-launch profiler test follows the script metric."""
        return Policy.from_gates(self.cfg.gates)

    @contextlib.contextmanager
    def rounds_asked(self, rounds: int | None):
        """`policy` with `max_rounds` = `rounds` for one verdict (save_and_test's `rounds`), then back.
        Raises RefereeError for rounds outside 1 .. [gates] max_rounds_asked (at least max_rounds)."""
        if rounds is None:
            yield self.policy
            return
        bound = max(self.cfg.gates.max_rounds, self.cfg.gates.max_rounds_asked)
        if not 1 <= rounds <= bound:
            raise RefereeError(f"rounds={rounds} is outside 1 .. {bound} ([gates] max_rounds_asked in kopt.toml, set "
                               "by the human): ask for fewer rounds, or ask the human to raise the bound")
        old = self.policy
        self.__dict__["policy"] = old.model_copy(update={"max_rounds": rounds})
        try:
            yield self.policy
        finally:
            self.__dict__["policy"] = old

    @property
    def target_regex(self) -> str | None:
        """The target kernels as a regular expression: `[profiler] kernel`, else BEST's target names
        exactly (evidence.trace.exact_names_regex; None before BEST has any)."""
        return self.cfg.profiler.kernel or exact_names_regex(self.state.best.kernels)

    def profiler(self, detail: bool = False) -> Profiler:
        """The configured profiler for the leased device's vendor (from `services.profiler`)."""
        make = getattr(self.job, "make_profiler", None)  # a remote lease picks the profiler its node has
        if make is not None:
            return make(self.cfg.profiler.backend, detail)
        vendor = self.device.vendor if self.device else "cpu"
        return self.services.profiler(self.cfg.profiler.backend, vendor, detail)

    def workspace_tree(self) -> str:
        """The workspace as a snapshot tree against BEST_COMMIT (benchmark outputs left out)."""
        return vcs.snapshot(self.ws, self.state.best.commit, self.state.benchmark_outputs).tree

    def close(self) -> None:
        """Release every job lease and the server lock."""
        self.release_job()
        executor = getattr(self, "executor", None)
        if executor is not None:
            executor.close()
        lock = getattr(self, "_server_lock", None)
        if lock is not None and lock.is_locked:
            lock.release()


def lease_dir_default() -> Path:
    """$KOPT_LEASE_DIR, else /tmp/kopt-mcp-leases."""
    return Path(os.environ.get("KOPT_LEASE_DIR", "/tmp/kopt-mcp-leases"))
