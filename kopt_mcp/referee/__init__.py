"""The referee: the domain operations behind the MCP tools, as plain functions over a `Session`
(referee/core.py says which module holds what). `Referee` is an opened Session with those
operations as methods, each serialized by the session lock and cancellable (`operation`)."""

from __future__ import annotations

import dataclasses
import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path

import git

from kopt_mcp.errors import Cancelled, DeviceLost, RefereeError, StateSaveError, VcsError
from kopt_mcp.gpus.base import GpuProbe
from kopt_mcp.referee import attempt, commit, gain, guards, ops
from kopt_mcp.referee.core import Session, short
from kopt_mcp.referee.opening import open_parts, recover_at_start
from kopt_mcp.referee.recovery import settle
from kopt_mcp.referee.recovery import stop as stop_session
from kopt_mcp.referee.services import Services
from kopt_mcp.referee.slots import sync

#: operations after which the session's HTML report is rewritten (they can record a verdict, a
#: commit, a revert, the baseline, a stop or the session's measured gain)
REPORTED = frozenset({"save_and_test", "commit_improvement", "revert_to_best", "run_benchmark", "find_idle_gpu",
                      "measure_session_gain", "end_session"})


#: the cancel events of the operations of this process that run or wait for their session's lock
_running: set[threading.Event] = set()
_running_lock = threading.Lock()


def cancel_all() -> int:
    """Set the cancel event of every operation of this process that runs or waits for its session's
    lock (the stdio client went away: app/stdio.py): each kills its running process tree and unwinds;
    one still waiting ends at once (Cancelled). Returns how many there were."""
    with _running_lock:
        events = list(_running)
    for e in events:
        e.set()
    return len(events)


def running_count() -> int:
    """How many operations of this process run or wait for their session's lock now."""
    with _running_lock:
        return len(_running)


def operation(fn):
    """Make `fn(session, ...)` one referee operation: serialized by the session lock, cancellable
    through the `cancel` event the caller passes (set it to kill the running process tree and
    unwind; `cancel_all` sets every running operation's), preceded by recovery of a half-done job
    (recovery.settle). One cancelled while it waited for the lock raises Cancelled before it starts."""

    @functools.wraps(fn)
    def run(self: Session, *args, cancel: threading.Event | None = None, **kwargs):
        event = cancel or threading.Event()
        with _running_lock:
            _running.add(event)
        try:
            return _locked(self, fn, event, args, kwargs)
        finally:
            with _running_lock:
                _running.discard(event)

    return run


def auto_report() -> bool:
    """Whether the HTML report is written after every operation of REPORTED: yes unless
    $KOPT_HTML_REPORT is "0" (the test suite sets it, tests/conftest.py: its charts cost a second or
    more of CPU per verdict; kopt://report.html and `kopt-mcp report` still render it on demand)."""
    return os.environ.get("KOPT_HTML_REPORT", "1") != "0"


def _locked(self: Session, fn, cancel: threading.Event, args, kwargs):
    """`fn` under the session lock (see `operation`)."""
    with self.lock:
        if cancel.is_set():
            raise Cancelled(f"{fn.__name__} was cancelled before it started")
        self.jobs.cancel = cancel
        settle(self)
        if not self.books.state.in_progress:
            try:
                sync(self)  # another candidate slot moved BEST: judge against the newest one
            except (git.GitCommandError, VcsError) as e:
                raise RefereeError(
                    f"another slot moved BEST and following it failed ({short(e)}): check `git -C "
                    f"{self.where.workspace_path} status`, remove a stale lock file if a git process was killed, "
                    "then call again") from e
        try:
            result = _retry_once(self, fn, args, kwargs)
        except Cancelled:
            self.books.store.log("cancelled", operation=fn.__name__)
            raise
        finally:
            self.jobs.release()  # per-job leases: no device is held between calls
        if fn.__name__ in REPORTED and auto_report():  # the HTML report follows every verdict, commit, revert, stop
            # lazy: matplotlib (the report's charts) loads only once a report is written
            from kopt_mcp.views.report_html import write_session_report

            write_session_report(self)  # never raises: a failure is logged, the verdict stands
        return result


def _retry_once(sess: Session, fn, args, kwargs):
    """`fn` once more on a new job lease when its device was lost (DeviceLost); lost again: a
    RefereeError saying so. (save_and_test handles a lost device itself: its verdict is `failed`.)"""
    try:
        return fn(sess, *args, **kwargs)
    except DeviceLost as e:
        sess.jobs.device_lost(e, retrying=True)
    try:
        return fn(sess, *args, **kwargs)
    except DeviceLost as e:
        sess.jobs.device_lost(e, retrying=False)
        raise RefereeError(f"{fn.__name__}: the device was lost twice ({e}); nothing was recorded from the lost "
                           "runs. Call again when the machines are back") from e


class Referee(Session):
    """One optimization session on one repository: opened (or resumed) at construction.

    `services` injects the probe, profiler, runner and clock (referee.services.Services); the
    keyword arguments `probe`, `lease_dir`, `sleep` and `clock` replace single fields of it.
    `slot`: the candidate slot to open (None: the main one; referee/slots.py).
    Raises RefereeError when the session cannot open (another server on the repository, a
    session's own worktree, a changed frozen config) and ConfigError for a bad config."""

    def __init__(self, repo: Path, config_path: Path | None = None, tag: str | None = None,
                 probe: GpuProbe | None = None, lease_dir: Path | None = None,
                 sleep: Callable[[float], None] | None = None, clock: Callable[[], float] | None = None,
                 services: Services | None = None, slot: str | None = None) -> None:
        changes = {k: v for k, v in (("probe", probe), ("lease_dir", lease_dir), ("sleep", sleep),
                                     ("clock", clock)) if v is not None}
        services = dataclasses.replace(services or Services(), **changes)
        super().__init__(open_parts(repo, config_path, tag, services, slot))
        recover_at_start(self)

    status = ops.status  # read-only, no lock: a snapshot of the state
    find_idle_gpu = operation(ops.find_idle_gpu)
    run_benchmark = operation(ops.run_benchmark)
    kernel_trace_analysis = operation(ops.kernel_trace_analysis)
    warm_up_harness = operation(ops.warm_up_harness)
    revert_to_best = operation(ops.revert_to_best)
    get_attempt = operation(ops.get_attempt)
    save_and_test = operation(attempt.save_and_test)
    commit_improvement = operation(commit.commit_improvement)
    measure_session_gain = operation(gain.measure_session_gain)  # changes nothing; holds a device meanwhile
    end_session = operation(gain.end_session)  # measures the gain, then stops (Stop Summary committed)

    def judge_run_changes(self, changes, who: str):
        """guards.judge_run_changes on this session."""
        return guards.judge_run_changes(self, changes, who)

    def stop(self, reason: str) -> None:
        """Stop the session (recovery.stop): state `stopped`, Stop Summary written and committed."""
        stop_session(self, reason)


__all__ = ["Cancelled", "Referee", "RefereeError", "Services", "Session", "StateSaveError", "operation"]
