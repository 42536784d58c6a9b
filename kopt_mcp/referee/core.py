"""The referee's values: a `Session`, built whole from its `Parts` (referee/parts/: `where` the
paths, git and workspace; `what` the frozen config and policy; `books` the state, the store and the
commit point; `jobs` the executor, the job lease and its device), and the runs it makes on a lease.
The operations are plain functions over a Session (or the parts they use), one module per job:

    opening.py   open or resume a session: build its parts (locks, refusals, state, executor), recover
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
to the ledger directly: `books.record()` queues them in `state.outbox`, and `books.save()` writes state.json
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

A failed save (disk full, read-only) changes nothing in memory: `books.save()` restores the state to what
state.json holds (the last successful save) and raises `StateSaveError`; an operation that finds a
job marker left by such a failure first recovers it, as a restart would. Recovery at start removes
stale git lock files in the session's own worktrees and never raises: what it cannot fix, and a
ledger whose hash chain does not verify, is listed in `problems` (shown by `status`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
from pathlib import Path
from typing import NamedTuple

import git
from filelock import FileLock

from kopt_mcp import vcs
from kopt_mcp.bench.measure import Measurement, Profiled
from kopt_mcp.errors import RefereeError
from kopt_mcp.evidence.trace import exact_names_regex
from kopt_mcp.ledger import TIME_COLUMN_CPU, TIME_COLUMN_GPU, atomic_write, render_performance
from kopt_mcp.profilers.base import Profiler
from kopt_mcp.referee.parts import Books, Jobs, What, Where
from kopt_mcp.referee.parts.jobs import Progress  # noqa: F401 -- the operations import it from here
from kopt_mcp.referee.services import Services
from kopt_mcp.referee.slots import session_root, shared_events
from kopt_mcp.referee.state_guard import guarded

BASELINE_MESSAGE = "kopt: baseline"
STOP_MESSAGE = "kopt: stop summary"


def short(e: BaseException) -> str:
    """An exception as one line of at most 300 characters."""
    return " ".join(str(e).split())[:300]


class Parts(NamedTuple):
    """What a Session is built from (opening.open_parts builds them whole): `where` (paths, git,
    workspace), `what` (frozen config, policy), `books` (state, store, problems), `jobs` (executor,
    job lease, device, cancel event), the `services`, and the server lock it holds (None: none)."""

    where: Where
    what: What
    books: Books
    jobs: Jobs
    services: Services
    server_lock: FileLock | None = None


class Session:
    """One optimization session on one repository, built whole from its `Parts` (opening.open_parts):
    `where` (parts/where.py), `what` (parts/what.py), `books` (parts/books.py), `jobs`
    (parts/jobs.py) and the `services`. The operations take it (or the parts they use) as their
    first argument.

    `lock` serializes operations; `shared_lock` is the cross-process lock of the shared BEST
    (slots.best_lock); `server_lock` the one-server-per-repository lock it holds until `close`."""

    def __init__(self, parts: Parts) -> None:
        self.where, self.what, self.books, self.jobs, self.services, self.server_lock = parts
        self.lock = threading.RLock()
        self.shared_lock = FileLock(str(session_root(self.where) / "best.lock"), thread_local=False)

    def write_performance(self, extra: list[dict] | None = None) -> None:
        """Render performance.md from the ledger, the queued records and `extra` records (the ones
        about to be committed) into the workspace (atomic)."""
        events = shared_events(self) + list(self.books.state.outbox) + list(extra or [])
        device = self.jobs.device
        vendor = device.vendor if device is not None else None
        cpu = vendor == "cpu" or (vendor is None and self.what.cfg.gates.gpu_probe == "none")
        atomic_write(self.where.workspace_path / "performance.md", render_performance(
            events, self.what.cfg.benchmark.metric, TIME_COLUMN_CPU if cpu else TIME_COLUMN_GPU))

    def moved_head_warnings(self) -> list[str]:
        """A warning naming the commits made in the workspace since BEST_COMMIT, if any."""
        ws = self.where.ws
        best, head = self.books.state.best.commit, vcs.head_sha(ws)
        if head == best:
            return []
        log = ws.git.log("--format=%h %s", f"{best}..{head}").splitlines()
        shown = "; ".join(log[:10]) + (f"; and {len(log) - 10} more" if len(log) > 10 else "")
        return [(f"HEAD moved to {head[:12]} behind the server's back (commit(s): {shown or 'none on top of BEST'}); "
                f"the candidate is judged as its whole difference from BEST_COMMIT {best[:12]}. A revert drops "
                "these commits from the branch (their diff is in the attempt's archived patch); a commit puts "
                "their content in one new commit on top of BEST_COMMIT")]

    # -- runs on this call's job lease (parts/jobs.py; take it first: jobs.lease) ---------------

    def measure(self, tree: str, run_dir: Path, check: bool = True) -> Measurement:
        """One benchmark run of snapshot `tree` on this call's job lease (referee.measure). Raises
        DeviceLost when the device went away, Tampered when the run changed the state folder
        (`state_guarded`)."""
        with self.state_guarded():
            return self.jobs.job.measure(self.what.cfg, self.where.ws, tree, run_dir, self.env(), check=check,
                                         base=self._best_tree_id(), cancel=self.jobs.cancel, pid_dir=self.where.pid_dir)

    def profile(self, profiler: Profiler, tree: str, run_dir: Path, check: bool = False) -> Profiled:
        """One profiled run of snapshot `tree` on this call's job lease (its results read too; `check`:
        the [correctness] command after it). Raises DeviceLost, Tampered."""
        with self.state_guarded():
            return self.jobs.job.profile(self.what.cfg, profiler, self.where.ws, tree, run_dir, self.env(),
                                         base=self._best_tree_id(), check=check, cancel=self.jobs.cancel,
                                         pid_dir=self.where.pid_dir)

    def state_guarded(self):
        """Around one run: the state folder sealed before and restored after it; a change is listed
        in `problems`, logged, and raises Tampered (referee/state_guard.py)."""
        return guarded(self.books.store, self.where.ws, self.where.ref_prefix, self.books.problems)

    def _best_tree_id(self) -> str | None:
        try:
            return vcs.tree_of(self.where.ws, self.books.state.best.commit)
        except (git.GitCommandError, ValueError):
            return None

    def env(self) -> dict[str, str]:
        """Environment for every benchmark run: the device binding and the shared JIT caches."""
        device = self.jobs.device
        return {**(device.env if device else {}), **self.where.cache_dirs}

    @contextlib.contextmanager
    def rounds_asked(self, rounds: int | None):
        """`what.policy` with `max_rounds` = `rounds` for one verdict (save_and_test's `rounds`), then
        back. Raises RefereeError for rounds outside 1 .. [gates] max_rounds_asked (at least max_rounds)."""
        if rounds is None:
            yield self.what.policy
            return
        gates = self.what.cfg.gates
        bound = max(gates.max_rounds, gates.max_rounds_asked)
        if not 1 <= rounds <= bound:
            raise RefereeError(f"rounds={rounds} is outside 1 .. {bound} ([gates] max_rounds_asked in kopt.toml, set "
                               "by the human): ask for fewer rounds, or ask the human to raise the bound")
        old = self.what
        self.what = dataclasses.replace(old, policy=old.policy.model_copy(update={"max_rounds": rounds}))
        try:
            yield self.what.policy
        finally:
            self.what = old

    @property
    def target_regex(self) -> str | None:
        """The target kernels as a regular expression: `[profiler] kernel`, else BEST's target names
        exactly (evidence.trace.exact_names_regex; None before BEST has any)."""
        return self.what.cfg.profiler.kernel or exact_names_regex(self.books.state.best.kernels)

    def profiler(self, detail: bool = False) -> Profiler:
        """The configured profiler for the leased device's vendor (from `services.profiler`)."""
        backend = self.what.cfg.profiler.backend
        make = getattr(self.jobs.job, "make_profiler", None)  # a remote lease picks the profiler its node has
        if make is not None:
            return make(backend, detail)
        device = self.jobs.device
        return self.services.profiler(backend, device.vendor if device else "cpu", detail)

    def workspace_tree(self) -> str:
        """The workspace as a snapshot tree against BEST_COMMIT (benchmark outputs left out)."""
        state = self.books.state
        return vcs.snapshot(self.where.ws, state.best.commit, state.benchmark_outputs).tree

    def close(self) -> None:
        """Release every job lease and the server lock."""
        self.jobs.close()
        if self.server_lock is not None and self.server_lock.is_locked:
            self.server_lock.release()


def lease_dir_default() -> Path:
    """$KOPT_LEASE_DIR, else /tmp/kopt-mcp-leases."""
    return Path(os.environ.get("KOPT_LEASE_DIR", "/tmp/kopt-mcp-leases"))
