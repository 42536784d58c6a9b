"""The referee's base: opening or resuming a session, its locks, device lease and run helpers.

`Referee` (in `referee/__init__.py`) adds the tool operations on top of this class. Every public
operation is synchronous (run it in a worker thread), holds `self.lock`, and saves the state
atomically before returning.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from collections.abc import Callable
from datetime import date
from pathlib import Path

import git
from filelock import FileLock, Timeout

from kopt_mcp import faults, vcs
from kopt_mcp.config import load_config
from kopt_mcp.errors import StateError
from kopt_mcp.gpus import make_probe
from kopt_mcp.gpus.base import GpuProbe
from kopt_mcp.gpus.gate import GateOutcome, GpuGate, IdleThresholds
from kopt_mcp.gpus.lease import LeaseManager
from kopt_mcp.ledger import Store, append_perf_text, now_iso
from kopt_mcp.profilers import make_profiler
from kopt_mcp.profilers.base import Profiler
from kopt_mcp.referee.report import stop_summary
from kopt_mcp.results import DeviceInfo
from kopt_mcp.rules.verdict import Policy
from kopt_mcp.session import Best, Phase, SessionState

Progress = Callable[[float, float, str], None]
BASELINE_MESSAGE = "kopt: baseline"
STOP_MESSAGE = "kopt: stop summary"


class RefereeError(StateError, RuntimeError):
    """An operation cannot proceed; the message says what the caller should do next."""


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
            try:
                return fn(self, *args, **kwargs)
            except Cancelled:
                self.gate.release()
                self.device = None
                self.store.log("cancelled", operation=fn.__name__)
                raise

    return run


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
        vcs.ensure_excluded(self.repo)
        self.store = Store(self.workspace_path)
        # one server per repository: two sessions on one checkout would race on git and the GPUs
        (self.repo_path / ".kopt").mkdir(exist_ok=True)
        self._server_lock = FileLock(str(self.repo_path / ".kopt" / "server.lock"))
        holder = self.repo_path / ".kopt" / "server.json"
        try:
            self._server_lock.acquire(timeout=0)
        except Timeout as e:
            other = holder.read_text(encoding="utf-8").strip() if holder.exists() else "unknown session"
            raise RefereeError(
                f"another kopt-mcp server already runs on {self.repo_path} ({other}): stop it first; "
                "one server per repository") from e
        holder.write_text(json.dumps({"tag": self.tag, "pid": os.getpid(), "since": now_iso()}) + "\n",
                          encoding="utf-8")
        try:
            self._open(probe, lease_dir, {k: v for k, v in (("sleep", sleep), ("clock", clock)) if v})
        except BaseException:
            self._server_lock.release()
            raise

    def _open(self, probe, lease_dir, timing: dict) -> None:
        saved = self.store.load_state_json() if self.workspace_path.exists() else None
        if saved is None:
            self.config = load_config(self.config_path)
            self.ws = vcs.create_workspace(self.repo, self.workspace_path, self.branch)
            head = vcs.head_sha(self.ws)
            self.state = SessionState(
                tag=self.tag, branch=self.branch, repo=str(self.repo_path), workspace=str(self.workspace_path),
                best_worktree=str(self.best_path), config_path=str(self.config_path),
                config_sha256=self.config.sha256, best=Best(commit=head))
            self.store.save_state(self.state)
            self.store.log("session_started", tag=self.tag, branch=self.branch, best_commit=head,
                           config_sha256=self.config.sha256)
        else:
            self.state = SessionState.model_validate(saved)
            self.ws = vcs.open_workspace(self.repo, self.workspace_path, self.branch)
            self.config = load_config(Path(self.state.config_path))
            if self.config.sha256 != self.state.config_sha256:
                raise RefereeError(
                    f"{self.state.config_path} changed since session {self.tag!r} started (frozen hash "
                    f"{self.state.config_sha256[:12]}): restore it, or start a new session with another --tag")
            self._recover()
        self.best_tree = vcs.ensure_best_worktree(self.repo, self.best_path, self.state.best.commit)
        self.cfg = self.config.target
        gates = self.cfg.gates
        self.probe = probe or make_probe(gates.gpu_probe)
        self.gate = GpuGate(self.probe, LeaseManager(lease_dir or _lease_dir(), self.tag),
                            IdleThresholds(util_pct=gates.idle_util_pct, mem_mib=gates.idle_mem_mib),
                            wait_s=gates.gpu_wait_s, poll_s=gates.gpu_poll_s, **timing)
        self.device: DeviceInfo | None = None
        cache = self.repo_path / ".kopt" / "cache"
        self.cache_dirs = {"TRITON_CACHE_DIR": str(cache / "triton"),
                           "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
                           "CUDA_CACHE_PATH": str(cache / "cuda"),
                           "MIOPEN_USER_DB_PATH": str(cache / "miopen")}

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
        self.store.log("recovered", job=job, action=done)
        self.state.in_progress = None
        self.store.save_state(self.state)

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
        if s.phase in (Phase.repairing, Phase.improved):
            s.phase = Phase.ready
        s.repair, s.pending = None, None
        self.store.log("attempt", attempt=n, verdict="interrupted", reverted=True, patch=str(path),
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
                            job.get("gpu_us", p.candidate_gpu_us), recovered=True)
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
        follows, counters reset, the ledger records the commit. The caller saves the state."""
        s = self.state
        old = s.best.commit
        s.best.commit, s.best.metrics, s.best.gpu_us = sha, metrics, gpu_us
        vcs.ensure_best_worktree(self.repo, self.best_path, sha)
        s.phase, s.pending, s.repair = Phase.ready, None, None
        s.regressions = s.regressions.reset()
        s.kept += 1
        self.store.log("commit", attempt=attempt, commit=sha, previous=old, metrics=metrics, gpu_us=gpu_us,
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

    def save(self) -> None:
        """Save the state atomically."""
        self.store.save_state(self.state)

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
        """Stop the session: state `stopped`, Stop Summary appended to performance.md and committed.

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

    def _write_stop_summary(self) -> None:
        s = self.state
        append_perf_text(self.workspace_path / "performance.md", stop_summary(s, self.config.target.benchmark.metric))
        faults.point("stop.after_perf_written")
        try:
            vcs.commit_paths(self.ws, ["performance.md"], f"{STOP_MESSAGE} ({(s.stop_reason or '')[:60]})")
        except git.GitCommandError as e:
            self.store.log("stop_summary_commit_failed", error=str(e))
        faults.point("stop.after_git_commit")
        self.store.log("stopped", reason=s.stop_reason, best_commit=s.best.commit)

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
            return "the Stop Summary was committed: nothing to finish"
        self._restore_performance_md(base)  # undo a summary written but not committed, then write it once
        self._write_stop_summary()
        return "wrote and committed the Stop Summary the killed server had not finished"


def _lease_dir() -> Path:
    return Path(os.environ.get("KOPT_LEASE_DIR", "/tmp/kopt-mcp-leases"))
