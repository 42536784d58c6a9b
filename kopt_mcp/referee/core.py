"""The referee's base: opening or resuming a session, its locks, device lease and run helpers.

`Referee` (in `referee/__init__.py`) adds the tool operations on top of this class. Every public
operation is synchronous (run it in a worker thread) and holds `self.lock`.

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
  the job started): recovery (`_recover`) undoes or finishes the job and records what it did.
  No record of the unfinished transition reached the ledger, so an `interrupted` record never
  contradicts a verdict;
- after it leaves the new state with records the ledger may lack: recovery appends those whose
  `id` is not in the ledger yet (`flush_outbox`), exactly once.

Git steps inside a job (revert, commit, Stop Summary commit) happen before the commit point and are
either undone or adopted by recovery from what git shows (see `_recover`). performance.md is never
appended to: `write_performance` renders it from the ledger (plus the records being committed) with
`ledger.render_performance`, so its rows always come from ledger records.

A failed save (disk full, read-only) changes nothing in memory: `save()` restores the state to what
state.json holds (the last successful save) and raises `StateSaveError`; an operation that finds a
job marker left by such a failure first recovers it, as a restart would. Recovery at start removes
stale git lock files in the session's own worktrees (a git process killed holding index.lock) and
never raises: what it cannot fix, and a ledger whose hash chain does not verify, is listed in
`problems` (shown by `status`).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import threading
from collections.abc import Callable
from datetime import date
from pathlib import Path

import git
import psutil
from filelock import FileLock, Timeout

from kopt_mcp import faults, vcs
from kopt_mcp.config import load_config
from kopt_mcp.errors import StateError
from kopt_mcp.gpus import make_probe
from kopt_mcp.gpus.base import GpuProbe
from kopt_mcp.gpus.cpu import CpuLoadProbe
from kopt_mcp.gpus.gate import GateOutcome, GpuGate, IdleThresholds
from kopt_mcp.gpus.lease import LeaseManager
from kopt_mcp.ledger import Store, atomic_write, new_record, now_iso, render_performance
from kopt_mcp.paths import kopt_dir, session_dir
from kopt_mcp.profilers import make_profiler
from kopt_mcp.profilers.base import Profiler
from kopt_mcp.referee.report import stop_summary
from kopt_mcp.results import DeviceInfo
from kopt_mcp.rules.verdict import Policy
from kopt_mcp.runner import end_leftovers
from kopt_mcp.session import Best, Phase, SessionState

Progress = Callable[[float, float, str], None]
BASELINE_MESSAGE = "kopt: baseline"
STOP_MESSAGE = "kopt: stop summary"


class RefereeError(StateError, RuntimeError):
    """An operation cannot proceed; the message says what the caller should do next."""


class StateSaveError(RefereeError):
    """state.json could not be written (disk full, read-only): nothing changed in memory."""


class Cancelled(StateError, RuntimeError):
    """The client cancelled the call: the running process tree was killed, the lease released and
    the session left as it was before the call (an archived patch is kept, labelled `cancelled`)."""


def operation(fn):
    """Make `fn` one referee operation: serialized by the session lock, cancellable through the
    `cancel` event the caller passes (set it to kill the running process tree and unwind)."""

    @functools.wraps(fn)
    def run(self, *args, cancel: threading.Event | None = None, **kwargs):
        with self.lock:
            self.cancel = cancel or threading.Event()
            self.settle()
            try:
                result = fn(self, *args, **kwargs)
            except Cancelled:
                self.gate.release()
                self.device = None
                self.store.log("cancelled", operation=fn.__name__)
                raise
            if fn.__name__ in REPORTED:  # the HTML report follows every verdict, commit, revert and stop
                from kopt_mcp.report_html import write_session_report

                write_session_report(self)  # never raises: a failure is logged, the verdict stands
            return result

    return run


#: operations after which the session's HTML report is rewritten (they can record a verdict, a
#: commit, a revert, the baseline or a stop)
REPORTED = frozenset({"save_and_test", "commit_improvement", "revert_to_best", "run_benchmark", "find_idle_gpu"})


def default_tag() -> str:
    """Session tag from today's date, e.g. `2026-11-22`."""
    return date.today().isoformat()


class RefereeBase:
    """Session files, locks, device lease and shared helpers (see module docstring)."""

    def __init__(self, repo: Path, config_path: Path | None = None, tag: str | None = None,
                 probe: GpuProbe | None = None, lease_dir: Path | None = None,
                 sleep: Callable[[float], None] | None = None, clock: Callable[[], float] | None = None):
        self.repo_path = repo.resolve()
        self.repo = vcs.open_repo(self.repo_path)
        self.tag = tag or default_tag()
        self.branch = f"kernel-opt/{self.tag}"
        self.workspace_path = self.repo_path / ".kopt" / "worktrees" / self.tag
        self.best_path = self.repo_path / ".kopt" / "worktrees" / f"{self.tag}-best"
        self.config_path = (config_path or self.repo_path / "kopt.toml").resolve()
        self.lock = threading.RLock()
        self.cancel = threading.Event()
        self.problems: list[str] = []  # what recovery could not fix, a ledger that does not verify
        vcs.ensure_excluded(self.repo)
        self.kopt_dir = kopt_dir(self.repo)
        self.state_dir = session_dir(self.repo, self.tag)
        self.store = Store(self.state_dir)
        # one server per git repository (keyed by its common git dir, shared by every worktree):
        # two sessions on one repository would race on git and the GPUs
        self.kopt_dir.mkdir(parents=True, exist_ok=True)
        self._server_lock = FileLock(str(self.kopt_dir / "server.lock"))
        holder = self.kopt_dir / "server.json"
        try:
            self._server_lock.acquire(timeout=0)
        except Timeout as e:
            other = holder.read_text(encoding="utf-8").strip() if holder.exists() else "unknown session"
            raise RefereeError(
                f"another kopt-mcp server already runs on this git repository ({other}; common git dir "
                f"{self.kopt_dir.parent}): stop it first; one server per repository: its workspace and "
                "the repository's other worktrees cannot host a second session") from e
        # every run of this repository's server is recorded here while it lasts: a run a killed
        # server left behind is ended before anything else (runner.end_leftovers)
        self.pid_dir = self.kopt_dir / "pids"
        try:
            self._refuse_nested()
            ended = end_leftovers(self.pid_dir)  # normal recovery, not a problem: logged below
            holder.write_text(json.dumps({"tag": self.tag, "pid": os.getpid(), "repo": str(self.repo_path),
                                          "since": now_iso()}) + "\n", encoding="utf-8")
            self._open(probe, lease_dir, {k: v for k, v in (("sleep", sleep), ("clock", clock)) if v})
            if ended:
                self.store.log("leftovers_ended", pids=ended,
                               note="runs a killed kopt-mcp server left running were ended before recovery")
        except BaseException:
            self._server_lock.release()
            raise

    def _refuse_nested(self) -> None:
        """Refuse a repository path that is a session's own worktree (workspace or BEST)."""
        for state in sorted(self.kopt_dir.glob("*/state.json")):
            try:
                saved = json.loads(state.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            for key in ("workspace", "best_worktree"):
                if saved.get(key) and Path(saved[key]).resolve() == self.repo_path:
                    raise RefereeError(
                        f"{self.repo_path} is the {key.replace('_', ' ')} of kopt-mcp session {saved.get('tag')!r} "
                        f"of {saved.get('repo')}: start the server on {saved.get('repo')} instead")
        parts = self.repo_path.parts
        if any(parts[i:i + 2] == (".kopt", "worktrees") for i in range(len(parts) - 1)):
            raise RefereeError(f"{self.repo_path} lies in a kopt-mcp session's worktrees folder: start the server "
                               "on the repository itself")

    def _open(self, probe, lease_dir, timing: dict) -> None:
        legacy = self.workspace_path / ".kopt"  # sessions of kopt-mcp <= 0.x kept their files in the workspace
        if (legacy / "state.json").exists() and not self.store.state_path.exists():
            self.state_dir.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(legacy), str(self.state_dir))
        saved = self.store.load_state_json()
        if saved is None:
            self.config = load_config(self.config_path)
            self.cfg = self.config.target
            self.ws = vcs.create_workspace(self.repo, self.workspace_path, self.branch)
            head = vcs.head_sha(self.ws)
            try:
                base_md = self.ws.git.show(f"{head}:performance.md")
                base_md += "" if base_md.endswith("\n") else "\n"
            except git.GitCommandError:
                base_md = None
            self.state = SessionState(
                tag=self.tag, branch=self.branch, repo=str(self.repo_path), workspace=str(self.workspace_path),
                best_worktree=str(self.best_path), config_path=str(self.config_path),
                config_sha256=self.config.sha256, best=Best(commit=head))
            self.record("session_started", tag=self.tag, branch=self.branch, best_commit=head,
                        config_sha256=self.config.sha256, performance_md=base_md)
            self.save()
        else:
            self.state = SessionState.model_validate(saved)
            if self.state.outbox:  # committed records a kill kept from the ledger: the anchor counts them
                self.flush_outbox()
            self.problems += self.store.verify()
            self.ws = vcs.open_workspace(self.repo, self.workspace_path, self.branch)
            self.config = load_config(Path(self.state.config_path))
            if self.config.sha256 != self.state.config_sha256:
                raise RefereeError(
                    f"{self.state.config_path} changed since session {self.tag!r} started (frozen hash "
                    f"{self.state.config_sha256[:12]}): restore it, or start a new session with another --tag")
            self.cfg = self.config.target
            self._clear_stale_locks()
            try:
                self.settle()
            except Exception as e:  # noqa: BLE001 -- the server always starts; status shows what is wrong
                self.problems.append(f"recovery at start failed ({type(e).__name__}): {_short(e)}. Any tool call "
                                     "retries it first")
        try:
            self.best_tree = vcs.ensure_best_worktree(self.repo, self.best_path, self.state.best.commit)
        except (git.GitCommandError, vcs.VcsError, OSError) as e:
            self.best_tree = None
            self.problems.append(f"the BEST worktree {self.best_path} could not be checked out at "
                                 f"{self.state.best.commit[:12]} ({_short(e)}): measuring calls will fail until "
                                 "it is fixed (remove the folder and `git worktree prune`, then restart)")
        self.cfg = self.config.target
        gates = self.cfg.gates
        self.probe = probe or make_probe(gates.gpu_probe)
        self.gate = GpuGate(self.probe, LeaseManager(lease_dir or _lease_dir(), self.tag),
                            IdleThresholds(util_pct=gates.idle_util_pct, mem_mib=gates.idle_mem_mib,
                                           cpu_pct=gates.idle_cpu_pct),
                            wait_s=gates.gpu_wait_s, poll_s=gates.gpu_poll_s,
                            cpu_probe=CpuLoadProbe() if gates.idle_cpu_pct < 100 else None,
                            cpu_wait_s=gates.cpu_wait_s, **timing)
        self.device: DeviceInfo | None = None
        cache = self.repo_path / ".kopt" / "cache"
        self.cache_dirs = {"TRITON_CACHE_DIR": str(cache / "triton"),
                           "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
                           "CUDA_CACHE_PATH": str(cache / "cuda"),
                           "MIOPEN_USER_DB_PATH": str(cache / "miopen")}

    # -- commit point, outbox, recovery ----------------------------------------------------

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

    def settle(self) -> None:
        """Before an operation (and at start): append committed records the ledger lacks, and
        finish or undo a job a killed server, or a failed save, left half done. Raises
        RefereeError when recovery itself fails (the text says what to do)."""
        if self.state.outbox:
            self.flush_outbox()
        if self.state.in_progress:
            try:
                self._recover()
                self.problems = [p for p in self.problems if not p.startswith("recovery at start failed")]
            except (git.GitCommandError, vcs.VcsError) as e:
                raise RefereeError(
                    f"could not finish the interrupted job {self.state.in_progress.get('tool')!r} ({_short(e)}): "
                    f"check `git -C {self.workspace_path} status`, remove a stale lock file if a git process "
                    "was killed, then call again") from e

    def _clear_stale_locks(self) -> None:
        """Remove git lock files a killed git process left in the session's OWN worktrees and refs
        (index.lock, HEAD.lock, the branch's ref lock), unless a git process runs in that worktree
        (the agent's own git command); the repository-wide ones (packed-refs.lock, the main
        checkout's index.lock) only while no git process runs at all. Logged to the ledger."""
        common = self.kopt_dir.parent
        busy: list[Path] = []  # working folders of running git processes
        for proc in psutil.process_iter(["name", "cmdline"]):
            # GitPython's long-lived `git cat-file` readers (this server's too) never hold a lock
            if proc.info.get("name") == "git" and "cat-file" not in (proc.info.get("cmdline") or [])[1:2]:
                try:
                    busy.append(Path(proc.cwd()).resolve())
                except (psutil.Error, OSError):
                    busy.append(Path("/"))  # unknown: treat as running everywhere
        def idle(folder: Path) -> bool:
            return not any(b == folder or folder in b.parents or b == Path("/") for b in busy)

        locks: list[Path] = []
        if idle(self.workspace_path) and idle(self.repo_path):
            locks.append(common / "refs" / "heads" / f"{self.branch}.lock")
        for wt in (self.workspace_path, self.best_path):
            gitfile = wt / ".git"
            try:
                gitdir = Path(gitfile.read_text().split(":", 1)[1].strip()) if gitfile.is_file() else None
            except (OSError, IndexError):
                gitdir = None
            if gitdir is not None and idle(wt):
                locks += [gitdir / "index.lock", gitdir / "HEAD.lock"]
        if not busy:
            locks += [common / "packed-refs.lock", common / "index.lock", common / "HEAD.lock"]
        removed = []
        for lock in locks:
            if not lock.exists():
                continue
            try:
                lock.unlink()
                removed.append(str(lock))
            except OSError as e:
                self.problems.append(f"stale git lock {lock} could not be removed ({e}): remove it by hand")
        if removed:
            self.store.log("stale_git_locks_removed", paths=removed)

    def write_performance(self, extra: list[dict] | None = None) -> None:
        """Render performance.md from the ledger, the queued records and `extra` records (the ones
        about to be committed) into the workspace (atomic)."""
        events = self.store.ledger() + list(self.state.outbox) + list(extra or [])
        atomic_write(self.workspace_path / "performance.md", render_performance(events, self.cfg.benchmark.metric))

    def _recover(self) -> None:
        """Finish what a killed server left half done (the job in `state.in_progress`):

        - save_and_test, verdict not saved: the attempt's patch (archived from the tree if the kill
          came before the archive) is labelled `interrupted`, the tree reset to BEST_COMMIT and a
          candidate under repair dropped (phase ready). A saved verdict (`last` is this attempt, or
          phase `improved` with this attempt pending) means the job had finished: nothing to undo.
        - commit_improvement: the branch already has the new commit (trailer `kopt-mcp attempt N`,
          parent BEST_COMMIT) -> adopt it as BEST_COMMIT and finish the bookkeeping; no commit yet ->
          restore the exact tested tree (this also undoes a performance.md written but not committed
          and any staged leftovers); the phase stays `improved`.
        - the baseline's bookkeeping (performance.md rows, the `kopt: baseline` commit), state not
          saved: the half-done commit is dropped and performance.md restored as it was, so the
          next run_benchmark measures and records the baseline once (phase stays needs_baseline).
        - stop: the stopped state is saved; the Stop Summary is written and committed once (a
          summary already committed is left, a half-written one is replaced).
        - anything else: a stale marker, logged and cleared.
        """
        job = self.state.in_progress
        if not job:
            return
        tool, done = job.get("tool"), "stale marker cleared"
        if tool == "save_and_test" and job.get("attempt"):
            done = self._recover_attempt(int(job["attempt"]))
        elif tool == "commit_improvement" and job.get("attempt"):
            done = self._recover_commit(int(job["attempt"]), job)
        elif tool == "baseline":
            done = self._recover_baseline(job.get("base") or self.state.best.commit)
        elif tool == "stop":
            done = self._recover_stop(job.get("base") or self.state.best.commit)
        self.record("recovered", job=job, action=done)
        self.state.in_progress = None
        self.save()

    def _recover_attempt(self, n: int) -> str:
        s = self.state
        if (s.last and s.last.attempt == n) or (s.phase == Phase.improved and s.pending and s.pending.attempt == n):
            return "the verdict was saved: nothing to undo"
        found = self.store.find_patch(n)
        if found is None:
            patch, _ = vcs.diff_against(self.ws, s.best.commit)
            path = self.store.archive(n, "interrupted", patch)
            label = "none"
        else:
            label = found.name[len(f"{n:04d}-"):-len(".patch")]
            path = self.store.relabel(n, label, "interrupted") if label != "interrupted" else found
        vcs.reset_to(self.ws, s.best.commit)
        faults.point("recover.after_reset")
        if s.phase in (Phase.repairing, Phase.improved):
            s.phase = Phase.ready
        s.repair, s.pending = None, None
        self.record("attempt", attempt=n, verdict="interrupted", reverted=True, patch=str(path),
                       reason=f"the server was killed during save_and_test (patch was labelled {label!r}); "
                       "the candidate was archived and the tree reset to BEST_COMMIT")
        return f"attempt {n} archived as interrupted, tree reset to BEST_COMMIT"

    def _recover_commit(self, n: int, job: dict) -> str:
        s, p = self.state, self.state.pending
        if s.phase != Phase.improved or p is None or p.attempt != n:
            return "the commit was saved: nothing to undo"
        head = vcs.head_sha(self.ws)
        if head != s.best.commit and self._is_commit_of(head, n):
            self.ws.git.reset("-q")
            self.adopt_best(n, head, job.get("metrics") or p.candidate_metrics,
                            job.get("gpu_us", p.candidate_gpu_us), recovered=True, rows=job.get("rows") or [])
            return f"adopted commit {head[:12]} of attempt {n} as BEST_COMMIT"
        try:
            vcs.restore_tree(self.ws, p.tree)
        except git.GitCommandError as e:  # the tree object is gone (gc): keep the files, clear the index
            self.ws.git.reset("-q")
            return f"could not restore the tested tree ({e}); index reset, files left as they are"
        return f"restored the tested tree of attempt {n}; phase stays improved"

    def _recover_baseline(self, base: str) -> str:
        s = self.state
        if s.phase != Phase.needs_baseline:
            return "the baseline was saved: nothing to undo"
        head = self.ws.head.commit
        dropped = ""
        if head.hexsha != base and head.message.strip() == BASELINE_MESSAGE and [c.hexsha for c in head.parents] == [base]:
            self.ws.git.reset("-q", "--soft", base)  # the commit goes; the files stay as they are
            dropped = f"dropped the half-done baseline commit {head.hexsha[:12]}; "
        self._restore_performance_md(base)
        s.best.commit = base
        return f"{dropped}performance.md restored; run_benchmark records the baseline again"

    def adopt_best(self, attempt: int, sha: str, metrics: dict[str, float], gpu_us: float | None,
                   **log_fields) -> None:
        """A keep is committed as `sha`: BEST_COMMIT moves there with its metrics, the BEST worktree
        follows, counters reset, the `commit` record (with `rows`, its performance.md rows) is queued.
        The caller saves the state (the commit point)."""
        s = self.state
        old = s.best.commit
        s.best.commit, s.best.metrics, s.best.gpu_us = sha, metrics, gpu_us
        vcs.ensure_best_worktree(self.repo, self.best_path, sha)
        faults.point("commit_improvement.after_best_worktree")
        s.phase, s.pending, s.repair = Phase.ready, None, None
        s.regressions = s.regressions.reset()
        s.kept += 1
        self.record("commit", attempt=attempt, commit=sha, previous=old, metrics=metrics, gpu_us=gpu_us,
                    **log_fields)

    def _is_commit_of(self, sha: str, n: int) -> bool:
        """True if `sha` is commit_improvement's commit of attempt `n` on top of BEST_COMMIT."""
        c = self.ws.commit(sha)
        return f"kopt-mcp attempt {n}, " in c.message and [x.hexsha for x in c.parents] == [self.state.best.commit]

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

    def close(self) -> None:
        """Release the GPU lease and the server lock."""
        self.gate.release()
        if self._server_lock.is_locked:
            self._server_lock.release()

    # -- helpers shared by the operations -------------------------------------------------

    def lease(self, progress: Progress | None, stop_now: bool = True) -> GateOutcome:
        """Acquire (or keep) the device lease. With none after the whole wait the session must stop
        (reason `no idle GPU: ...`): at once, or by the caller after its own clean-up (stop_now=False)."""
        outcome = self.gate.acquire(progress=progress, cancel=self.cancel, own_pids=frozenset({os.getpid()}))
        if outcome.lease is None:
            self.device = None
            if outcome.reason == "cancelled":
                raise Cancelled("cancelled while waiting for an idle GPU")
            if stop_now:
                self.stop(f"no idle GPU: {outcome.reason}")
            return outcome
        le = outcome.lease
        self.device = DeviceInfo(vendor=le.vendor, index=le.index, name=le.name, env=le.env,
                                 note=outcome.device_note)
        return outcome

    def env(self) -> dict[str, str]:
        """Environment for every benchmark run: the device binding and the shared JIT caches."""
        return {**(self.device.env if self.device else {}), **self.cache_dirs}

    def policy(self, screening: bool = False) -> Policy:
        """The script-metric thresholds of `[gates]`. `screening`: a profiler test on per-launch GPU
        time follows (at `confidence`), so the script metric is a screen at `screen_confidence` and
        the profiled run is the confirming measurement (Policy.profiler_confirms)."""
        g = self.cfg.gates
        return Policy(noise_pct=g.noise_pct, confirmations=g.confirmations,
                      confidence=g.screen_confidence if screening else g.confidence, max_rounds=g.max_rounds,
                      profiler_confirms=screening)

    def profiler(self, detail: bool = False) -> Profiler:
        """The configured profiler for the leased device's vendor."""
        vendor = self.device.vendor if self.device else "cpu"
        return make_profiler(self.cfg.profiler.backend, vendor, detail=detail)

    def stop(self, reason: str) -> None:
        """Stop the session: state `stopped`, the `stopped` record (with the Stop Summary) queued,
        performance.md rendered from the ledger and committed, then the record committed.

        The stopped state is saved first, with an in-progress marker: a server killed while writing
        or committing the summary finishes it on restart (`_recover_stop`), exactly once."""
        s = self.state
        if s.phase == Phase.stopped:
            return
        s.phase, s.stop_reason, s.stopped_at = Phase.stopped, reason, now_iso()
        outer, s.in_progress = s.in_progress, {"tool": "stop", "since": now_iso(), "base": s.best.commit}
        self.save()
        self._write_stop_summary()
        s.in_progress = outer
        self.save()

    def _write_stop_summary(self, commit: bool = True) -> None:
        """Queue the `stopped` record (with the Stop Summary text), render performance.md from the
        ledger and, with `commit`, commit it on top of BEST_COMMIT."""
        s = self.state
        self.record("stopped", reason=s.stop_reason, best_commit=s.best.commit,
                    summary=stop_summary(s, self.config.target.benchmark.metric))
        if not commit:
            return
        self.write_performance()
        faults.point("stop.after_perf_written")
        try:
            vcs.commit_paths(self.ws, ["performance.md"], f"{STOP_MESSAGE} ({(s.stop_reason or '')[:60]})")
        except git.GitCommandError as e:
            self.store.log("stop_summary_commit_failed", error=str(e))
        faults.point("stop.after_git_commit")

    def _restore_performance_md(self, base: str) -> None:
        """Unstage everything and put performance.md back as it is in `base` (absent there: removed)."""
        self.ws.git.reset("-q")
        try:
            self.ws.git.checkout(base, "--", "performance.md")
        except git.GitCommandError:
            (self.workspace_path / "performance.md").unlink(missing_ok=True)

    def _recover_stop(self, base: str) -> str:
        if self.state.phase != Phase.stopped:
            return "the session did not stop: nothing to finish"
        head = self.ws.head.commit
        if head.message.startswith(STOP_MESSAGE) and [c.hexsha for c in head.parents] == [base]:
            self._write_stop_summary(commit=False)  # the committed summary is the one recorded
            return "the Stop Summary was committed; its ledger record written"
        self._restore_performance_md(base)  # undo a summary written but not committed, then write it once
        self._write_stop_summary()
        return "wrote and committed the Stop Summary the killed server had not finished"


def _short(e: BaseException) -> str:
    """An exception as one line of at most 300 characters."""
    return " ".join(str(e).split())[:300]


def _lease_dir() -> Path:
    return Path(os.environ.get("KOPT_LEASE_DIR", "/tmp/kopt-mcp-leases"))
