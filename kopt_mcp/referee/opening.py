"""Opening or resuming a session: the one-server-per-repository lock, refusing a session's own
worktree, the state (new, resumed or moved from a legacy location), the frozen config, the BEST
worktree and the GPU gate. Recovery of a half-done job runs here too (recovery.settle)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import git
from filelock import FileLock, Timeout

from kopt_mcp import vcs
from kopt_mcp.bench.local import LocalExecutor
from kopt_mcp.bench.preflight import preflight
from kopt_mcp.bench.runner import end_leftovers
from kopt_mcp.config import load_config
from kopt_mcp.errors import RefereeError, VcsError
from kopt_mcp.gpus import make_probe
from kopt_mcp.gpus.cpu import CpuLoadProbe
from kopt_mcp.gpus.gate import IdleThresholds
from kopt_mcp.ledger import now_iso
from kopt_mcp.referee.core import Session, lease_dir_default, short
from kopt_mcp.referee.recovery import clear_stale_locks, settle
from kopt_mcp.referee.slots import read_shared
from kopt_mcp.referee.state_guard import restore_lost_patches
from kopt_mcp.session import Best, SessionState


def open_session(sess: Session) -> None:
    """Open `sess` (built by Session.__init__): take the server lock, end runs a killed server left
    behind, create or resume the state, and build the GPU gate. Raises RefereeError when another
    server holds the repository, when the path is a session's own worktree, or when the frozen
    config changed, and PreflightError when a command of the config cannot start on this host
    (kopt_mcp/bench/preflight.py); the lock is released again on any error."""
    sess.kopt_dir.mkdir(parents=True, exist_ok=True)
    # one server per git repository (keyed by its common git dir, shared by every worktree):
    # two sessions on one repository would race on git and the GPUs
    lock_name = f"server@{sess.slot}" if sess.slot else "server"  # one process per slot
    sess._server_lock = FileLock(str(sess.kopt_dir / f"{lock_name}.lock"))
    holder = sess.kopt_dir / f"{lock_name}.json"
    try:
        sess._server_lock.acquire(timeout=0)
    except Timeout as e:
        other = holder.read_text(encoding="utf-8").strip() if holder.exists() else "unknown session"
        if sess.slot:
            raise RefereeError(f"another kopt-mcp server already runs slot {sess.slot!r} of this repository "
                               f"({other}): one process per slot; pass another --slot") from e
        raise RefereeError(
            f"another kopt-mcp server already runs on this git repository ({other}; common git dir "
            f"{sess.kopt_dir.parent}): stop it first; one server per repository: its workspace and "
            "the repository's other worktrees cannot host a second session. A second agent on the same "
            "session: start it with `--slot NAME` (or `--slot auto`)") from e
    try:
        refuse_nested(sess)
        # every run of this repository's server is recorded while it lasts: a run a killed server
        # left behind is ended before anything else (runner.end_leftovers)
        ended = end_leftovers(sess.pid_dir)
        holder.write_text(json.dumps({"tag": sess.tag, "pid": os.getpid(), "repo": str(sess.repo_path),
                                      "since": now_iso(), **({"slot": sess.slot} if sess.slot else {})}) + "\n",
                          encoding="utf-8")
        _open_state(sess)
        if sess.services.executor is None and not sess.cfg.cluster.ray_address:  # the commands run on this host
            preflight(sess.cfg, Path(sess.ws.working_tree_dir))  # before any wait for a device or run
        _open_gate(sess)
        if ended:
            sess.store.log("leftovers_ended", pids=ended,
                           note="runs a killed kopt-mcp server left running were ended before recovery")
    except BaseException:
        sess._server_lock.release()
        raise


def refuse_nested(sess: Session) -> None:
    """Refuse a repository path that is a session's own worktree (workspace or BEST)."""
    for state in sorted([*sess.kopt_dir.glob("*/state.json"), *sess.kopt_dir.glob("*/slots/*/state.json")]):
        try:
            saved = json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for key in ("workspace", "best_worktree"):
            if saved.get(key) and Path(saved[key]).resolve() == sess.repo_path:
                raise RefereeError(
                    f"{sess.repo_path} is the {key.replace('_', ' ')} of kopt-mcp session {saved.get('tag')!r} "
                    f"of {saved.get('repo')}: start the server on {saved.get('repo')} instead")
    parts = sess.repo_path.parts
    if any(parts[i:i + 2] == (".kopt", "worktrees") for i in range(len(parts) - 1)):
        raise RefereeError(f"{sess.repo_path} lies in a kopt-mcp session's worktrees folder: start the server "
                           "on the repository itself")


def _open_state(sess: Session) -> None:
    """Create the session (workspace, state, `session_started` record) or resume it (outbox, ledger
    check, frozen-config check, stale git locks, recovery), then check out the BEST worktree."""
    legacy = sess.workspace_path / ".kopt"  # sessions of kopt-mcp <= 0.x kept their files in the workspace
    if (legacy / "state.json").exists() and not sess.store.state_path.exists():
        sess.state_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(legacy), str(sess.state_dir))
    saved = sess.store.load_state_json()
    if saved is None:
        sess.config = load_config(sess.config_path)
        sess.cfg = sess.config.target
        sess.ws = _create_slot_workspace(sess) if sess.slot else _create_main_workspace(sess)
        head = vcs.head_sha(sess.ws)
        try:
            base_md = sess.ws.git.show(f"{head}:performance.md")
            base_md += "" if base_md.endswith("\n") else "\n"
        except git.GitCommandError:
            base_md = None
        sess.state = SessionState(
            tag=sess.tag, branch=sess.branch, repo=str(sess.repo_path), workspace=str(sess.workspace_path),
            best_worktree=str(sess.best_path), config_path=str(sess.config_path),
            config_sha256=sess.config.sha256, best=Best(commit=head))
        sess.record("session_started", tag=sess.tag, branch=sess.branch, best_commit=head,
                    config_sha256=sess.config.sha256, performance_md=base_md)
        sess.save()
    else:
        sess.state = SessionState.model_validate(saved)
        if sess.state.outbox:  # committed records a kill kept from the ledger: the anchor counts them
            sess.flush_outbox()
        sess.problems += sess.store.verify()
        sess.ws = vcs.open_workspace(sess.repo, sess.workspace_path, sess.branch)
        sess.problems += restore_lost_patches(sess.store, sess.ws, sess.ref_prefix)
        sess.config = load_config(Path(sess.state.config_path))
        if sess.config.sha256 != sess.state.config_sha256:
            raise RefereeError(
                f"{sess.state.config_path} changed since session {sess.tag!r} started (frozen hash "
                f"{sess.state.config_sha256[:12]}): restore it, or start a new session with another --tag")
        sess.cfg = sess.config.target
        clear_stale_locks(sess)
        try:
            settle(sess)
        except Exception as e:  # noqa: BLE001 -- the server always starts; status shows what is wrong
            sess.problems.append(f"recovery at start failed ({type(e).__name__}): {short(e)}. Any tool call "
                                 "retries it first")
    try:
        sess.best_tree = vcs.ensure_best_worktree(sess.repo, sess.best_path, sess.state.best.commit)
    except (git.GitCommandError, VcsError, OSError) as e:
        sess.best_tree = None
        sess.problems.append(f"the BEST worktree {sess.best_path} could not be checked out at "
                             f"{sess.state.best.commit[:12]} ({short(e)}): measuring calls will fail until "
                             "it is fixed (remove the folder and `git worktree prune`, then restart)")


def _create_main_workspace(sess: Session):
    """The main slot's workspace: a new branch `kernel-opt/<tag>` from HEAD (vcs.create_workspace).
    When candidate slots started the session before the main slot ever opened, that branch is
    their BEST line (best.json names its head): the workspace joins it, and the first call adopts
    the session's baseline (referee.slots.sync). Raises VcsError when the branch exists otherwise."""
    shared = read_shared(sess)
    if (shared and vcs.has_branch(sess.repo, sess.branch) and not sess.workspace_path.exists()
            and sess.repo.commit(sess.branch).hexsha == shared["commit"]):
        sess.workspace_path.parent.mkdir(parents=True, exist_ok=True)
        sess.repo.git.worktree("add", str(sess.workspace_path), sess.branch)
        return git.Repo(sess.workspace_path)
    return vcs.create_workspace(sess.repo, sess.workspace_path, sess.branch)


def _create_slot_workspace(sess: Session):
    """A candidate slot's workspace on its own branch, made from the session's BEST (the shared
    best.json, else the BEST line's branch, else HEAD). Raises VcsError when the branch or the folder
    exists already."""
    shared = read_shared(sess)
    line = f"kernel-opt/{sess.tag}"
    start = shared["commit"] if shared else (line if vcs.has_branch(sess.repo, line) else "HEAD")
    if vcs.has_branch(sess.repo, sess.branch) or sess.workspace_path.exists():
        raise VcsError(f"slot {sess.slot!r}: branch {sess.branch} or folder {sess.workspace_path} exists but "
                           "holds no slot state: pass another --slot, or remove them")
    sess.workspace_path.parent.mkdir(parents=True, exist_ok=True)
    sess.repo.git.worktree("add", "-b", sess.branch, str(sess.workspace_path), start)
    return git.Repo(sess.workspace_path)


def _open_gate(sess: Session) -> None:
    """The session's executor: `services.executor(sess)`; else, with `[cluster] ray_address`, the Ray
    executor (kopt_mcp.bench.cluster.ray_executor; ImportError names the install line when Ray is missing);
    else `local_executor(sess)` (this host)."""
    if sess.services.executor is not None:
        sess.executor = sess.services.executor(sess)
        return
    if sess.cfg.cluster.ray_address:  # imported only then: importing Ray takes seconds
        # lazy: importing Ray takes seconds: only with [cluster] ray_address
        from kopt_mcp.bench.cluster.ray_executor import executor_for

        sess.executor = executor_for(sess.cfg, sess.tag)
        return
    sess.executor = local_executor(sess)


def local_executor(sess: Session):
    """The local executor (kopt_mcp.bench.local.LocalExecutor) over the GPU gate of `[gates]`
    and the session's services (probe, clock, sleep, lease dir, runner)."""
    gates, sv = sess.cfg.gates, sess.services
    return LocalExecutor(
        probe=sv.probe or make_probe(gates.gpu_probe), lease_dir=sv.lease_dir or lease_dir_default(), tag=sess.tag,
        thresholds=IdleThresholds(util_pct=gates.idle_util_pct, mem_mib=gates.idle_mem_mib, cpu_pct=gates.idle_cpu_pct,
                                  cpu_exclusive=gates.exclusive_cpu),
        wait_s=gates.gpu_wait_s, poll_s=gates.gpu_poll_s,
        cpu_probe=CpuLoadProbe() if gates.idle_cpu_pct < 100 or gates.exclusive_cpu else None,
        cpu_wait_s=gates.cpu_wait_s, sleep=sv.sleep, clock=sv.clock, run=sv.run, clocks=sv.clocks, loads=sv.loads)
