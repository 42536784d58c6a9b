"""Opening or resuming a session: the one-server-per-repository lock, refusing a session's own
worktree, the state (new, resumed or moved from a legacy location), the frozen config and the
executor, built whole as the Session's `Parts` (`open_parts`); then recovery of a half-done job
(recovery.settle) and the BEST worktree on the built Session (`recover_at_start`)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import git
from filelock import FileLock, Timeout

from kopt_mcp import vcs
from kopt_mcp.bench.executor import Executor
from kopt_mcp.bench.local import LocalExecutor
from kopt_mcp.bench.preflight import preflight
from kopt_mcp.bench.runner import end_leftovers
from kopt_mcp.config import load_config
from kopt_mcp.errors import RefereeError, VcsError
from kopt_mcp.gpus import make_probe
from kopt_mcp.gpus.cpu import CpuLoadProbe
from kopt_mcp.gpus.gate import IdleThresholds
from kopt_mcp.ledger import Store, now_iso
from kopt_mcp.referee.core import Parts, Session, lease_dir_default, short
from kopt_mcp.referee.parts import Books, Jobs, Layout, What, Where
from kopt_mcp.referee.recovery import clear_stale_locks, settle
from kopt_mcp.referee.services import Services
from kopt_mcp.referee.slots import read_shared
from kopt_mcp.referee.state_guard import restore_lost_patches
from kopt_mcp.session import Best, SessionState


def open_parts(repo: Path, config_path: Path | None = None, tag: str | None = None,
               services: Services | None = None, slot: str | None = None) -> Parts:
    """Open session `tag` (default: today) slot `slot` on `repo` and build its parts whole: take the
    server lock, end runs a killed server left behind, create or resume the state (the workspace,
    the frozen config, the books), and build the executor. Raises RefereeError when another server
    holds the repository, when the path is a session's own worktree, or when the frozen config
    changed; PreflightError when a command of the config cannot start on this host
    (kopt_mcp/bench/preflight.py); ValueError for a bad slot name. The lock is released again on
    any error. Recovery of a half-done job follows on the built Session (`recover_at_start`)."""
    layout = Layout.locate(repo, config_path, tag, slot)
    vcs.ensure_excluded(layout.repo)
    layout.kopt_dir.mkdir(parents=True, exist_ok=True)
    # one server per git repository (keyed by its common git dir, shared by every worktree):
    # two sessions on one repository would race on git and the GPUs
    lock_name = f"server@{layout.slot}" if layout.slot else "server"  # one process per slot
    server_lock = FileLock(str(layout.kopt_dir / f"{lock_name}.lock"))
    holder = layout.kopt_dir / f"{lock_name}.json"
    try:
        server_lock.acquire(timeout=0)
    except Timeout as e:
        other = holder.read_text(encoding="utf-8").strip() if holder.exists() else "unknown session"
        if layout.slot:
            raise RefereeError(f"another kopt-mcp server already runs slot {layout.slot!r} of this repository "
                               f"({other}): one process per slot; pass another --slot") from e
        raise RefereeError(
            f"another kopt-mcp server already runs on this git repository ({other}; common git dir "
            f"{layout.kopt_dir.parent}): stop it first; one server per repository: its workspace and "
            "the repository's other worktrees cannot host a second session. A second agent on the same "
            "session: start it with `--slot NAME` (or `--slot auto`)") from e
    try:
        refuse_nested(layout)
        # every run of this repository's server is recorded while it lasts: a run a killed server
        # left behind is ended before anything else (runner.end_leftovers)
        ended = end_leftovers(layout.pid_dir)
        holder.write_text(json.dumps({"tag": layout.tag, "pid": os.getpid(), "repo": str(layout.repo_path),
                                      "since": now_iso(), **({"slot": layout.slot} if layout.slot else {})}) + "\n",
                          encoding="utf-8")
        where, what, books = _open_state(layout)
        services = services or Services()
        if services.executor is None and not what.cfg.cluster.ray_address:  # the commands run on this host
            preflight(what.cfg, Path(where.ws.working_tree_dir))  # before any wait for a device or run
        jobs = Jobs(make_executor(where, what, services), books.store.log, where.slot)
        if ended:
            books.store.log("leftovers_ended", pids=ended,
                            note="runs a killed kopt-mcp server left running were ended before recovery")
        return Parts(where, what, books, jobs, services, server_lock)
    except BaseException:
        server_lock.release()
        raise


def recover_at_start(sess: Session) -> None:
    """On the built session: finish or undo a job a killed server left half done (recovery.settle;
    what fails is listed in `books.problems`, and any tool call retries it first), then check the
    BEST worktree out at BEST_COMMIT (a failure is listed too). Releases the server lock when
    interrupted (KeyboardInterrupt and the like)."""
    try:
        try:
            settle(sess)
        except Exception as e:  # noqa: BLE001 -- the server always starts; status shows what is wrong
            sess.books.problems.append(f"recovery at start failed ({type(e).__name__}): {short(e)}. Any tool call "
                                       "retries it first")
        where, best = sess.where, sess.books.state.best.commit
        try:
            vcs.ensure_best_worktree(where.repo, where.best_path, best)
        except (git.GitCommandError, VcsError, OSError) as e:
            sess.books.problems.append(f"the BEST worktree {where.best_path} could not be checked out at "
                                       f"{best[:12]} ({short(e)}): measuring calls will fail until it is fixed "
                                       "(remove the folder and `git worktree prune`, then restart)")
    except BaseException:
        sess.close()
        raise


def refuse_nested(layout: Layout) -> None:
    """Refuse a repository path that is a session's own worktree (workspace or BEST)."""
    for state in sorted([*layout.kopt_dir.glob("*/state.json"), *layout.kopt_dir.glob("*/slots/*/state.json")]):
        try:
            saved = json.loads(state.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for key in ("workspace", "best_worktree"):
            if saved.get(key) and Path(saved[key]).resolve() == layout.repo_path:
                raise RefereeError(
                    f"{layout.repo_path} is the {key.replace('_', ' ')} of kopt-mcp session {saved.get('tag')!r} "
                    f"of {saved.get('repo')}: start the server on {saved.get('repo')} instead")
    parts = layout.repo_path.parts
    if any(parts[i:i + 2] == (".kopt", "worktrees") for i in range(len(parts) - 1)):
        raise RefereeError(f"{layout.repo_path} lies in a kopt-mcp session's worktrees folder: start the server "
                           "on the repository itself")


def _open_state(layout: Layout) -> tuple[Where, What, Books]:
    """Create the session (workspace, state, `session_started` record) or resume it (outbox, ledger
    check, frozen-config check, stale git locks): its opened `Where`, its `What` and its `Books`."""
    legacy = layout.workspace_path / ".kopt"  # sessions of kopt-mcp <= 0.x kept their files in the workspace
    store = Store(layout.state_dir)
    if (legacy / "state.json").exists() and not store.state_path.exists():
        layout.state_dir.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(legacy), str(layout.state_dir))
    saved = store.load_state_json()
    if saved is None:
        return _new_state(layout, store)
    books = Books(store, SessionState.model_validate(saved))
    state = books.state
    if state.outbox:  # committed records a kill kept from the ledger: the anchor counts them
        books.flush_outbox()
    books.problems += store.verify()
    where = Where.opened(layout, vcs.open_workspace(layout.repo, layout.workspace_path, layout.branch))
    books.problems += restore_lost_patches(store, where.ws, where.ref_prefix)
    config = load_config(Path(state.config_path))
    if config.sha256 != state.config_sha256:
        raise RefereeError(
            f"{state.config_path} changed since session {layout.tag!r} started (frozen hash "
            f"{state.config_sha256[:12]}): restore it, or start a new session with another --tag")
    clear_stale_locks(where, books)
    return where, What.of(config), books


def _new_state(layout: Layout, store: Store) -> tuple[Where, What, Books]:
    """A new session: its workspace, its frozen config, and its state with `session_started` saved."""
    config = load_config(layout.config_path)
    ws = _create_slot_workspace(layout) if layout.slot else _create_main_workspace(layout)
    head = vcs.head_sha(ws)
    try:
        base_md = ws.git.show(f"{head}:performance.md")
        base_md += "" if base_md.endswith("\n") else "\n"
    except git.GitCommandError:
        base_md = None
    books = Books(store, SessionState(
        tag=layout.tag, branch=layout.branch, repo=str(layout.repo_path), workspace=str(layout.workspace_path),
        best_worktree=str(layout.best_path), config_path=str(layout.config_path),
        config_sha256=config.sha256, best=Best(commit=head)))
    books.record("session_started", tag=layout.tag, branch=layout.branch, best_commit=head,
                 config_sha256=config.sha256, performance_md=base_md)
    books.save()
    return Where.opened(layout, ws), What.of(config), books


def _create_main_workspace(layout: Layout) -> git.Repo:
    """The main slot's workspace: a new branch `kernel-opt/<tag>` from HEAD (vcs.create_workspace).
    When candidate slots started the session before the main slot ever opened, that branch is
    their BEST line (best.json names its head): the workspace joins it, and the first call adopts
    the session's baseline (referee.slots.sync). Raises VcsError when the branch exists otherwise."""
    shared = read_shared(layout)
    if (shared and vcs.has_branch(layout.repo, layout.branch) and not layout.workspace_path.exists()
            and layout.repo.commit(layout.branch).hexsha == shared["commit"]):
        layout.workspace_path.parent.mkdir(parents=True, exist_ok=True)
        layout.repo.git.worktree("add", str(layout.workspace_path), layout.branch)
        return git.Repo(layout.workspace_path)
    return vcs.create_workspace(layout.repo, layout.workspace_path, layout.branch)


def _create_slot_workspace(layout: Layout) -> git.Repo:
    """A candidate slot's workspace on its own branch, made from the session's BEST (the shared
    best.json, else the BEST line's branch, else HEAD). Raises VcsError when the branch or the folder
    exists already."""
    shared = read_shared(layout)
    line = f"kernel-opt/{layout.tag}"
    start = shared["commit"] if shared else (line if vcs.has_branch(layout.repo, line) else "HEAD")
    if vcs.has_branch(layout.repo, layout.branch) or layout.workspace_path.exists():
        raise VcsError(f"slot {layout.slot!r}: branch {layout.branch} or folder {layout.workspace_path} exists but "
                       "holds no slot state: pass another --slot, or remove them")
    layout.workspace_path.parent.mkdir(parents=True, exist_ok=True)
    layout.repo.git.worktree("add", "-b", layout.branch, str(layout.workspace_path), start)
    return git.Repo(layout.workspace_path)


def make_executor(where: Where, what: What, services: Services) -> Executor:
    """The session's executor: `services.executor(where, what, services)`; else, with `[cluster]
    ray_address`, the Ray executor (kopt_mcp.bench.cluster.ray_executor; ImportError names the
    install line when Ray is missing); else `local_executor` (this host)."""
    if services.executor is not None:
        return services.executor(where, what, services)
    if what.cfg.cluster.ray_address:
        # lazy: importing Ray takes seconds: only with [cluster] ray_address
        from kopt_mcp.bench.cluster.ray_executor import executor_for

        return executor_for(what.cfg, where.tag)
    return local_executor(where, what, services)


def local_executor(where: Where, what: What, services: Services) -> LocalExecutor:
    """The local executor (kopt_mcp.bench.local.LocalExecutor) over the GPU gate of `[gates]`
    and the session's services (probe, clock, sleep, lease dir, runner)."""
    gates, sv = what.cfg.gates, services
    return LocalExecutor(
        probe=sv.probe or make_probe(gates.gpu_probe), lease_dir=sv.lease_dir or lease_dir_default(), tag=where.tag,
        thresholds=IdleThresholds(util_pct=gates.idle_util_pct, mem_mib=gates.idle_mem_mib, cpu_pct=gates.idle_cpu_pct,
                                  cpu_exclusive=gates.exclusive_cpu),
        wait_s=gates.gpu_wait_s, poll_s=gates.gpu_poll_s,
        cpu_probe=CpuLoadProbe() if gates.idle_cpu_pct < 100 or gates.exclusive_cpu else None,
        cpu_wait_s=gates.cpu_wait_s, sleep=sv.sleep, clock=sv.clock, run=sv.run, clocks=sv.clocks, loads=sv.loads)
