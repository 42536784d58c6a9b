"""Finishing or undoing what a killed server (or a failed save) left half done, and the two
transitions recovery shares with the operations: adopting a new BEST_COMMIT and stopping.

See referee/core.py for the crash-consistency design (one commit point per transition)."""

from __future__ import annotations

from pathlib import Path

import git
import psutil

from kopt_mcp import vcs
from kopt_mcp.errors import RefereeError, VcsError
from kopt_mcp.gpus.gate import GateOutcome
from kopt_mcp.referee.core import BASELINE_MESSAGE, STOP_MESSAGE, Progress, Session, short
from kopt_mcp.referee.parts import Books, Layout, Where
from kopt_mcp.referee.report import latest_gain, stop_summary
from kopt_mcp.referee.slots import best_lock, publish, read_shared, unpublish
from kopt_mcp.rules.decision import Code
from kopt_mcp.session import Phase
from kopt_mcp.testing import faults


def settle(sess: Session) -> None:
    """Before an operation (and at start): append committed records the ledger lacks, and finish
    or undo a job a killed server, or a failed save, left half done. Raises RefereeError when
    recovery itself fails (the text says what to do)."""
    if sess.books.state.outbox:
        sess.books.flush_outbox()
    if sess.books.state.in_progress:
        try:
            recover(sess)
            sess.books.problems[:] = [p for p in sess.books.problems if not p.startswith("recovery at start failed")]
        except (git.GitCommandError, VcsError) as e:
            raise RefereeError(
                f"could not finish the interrupted job {sess.books.state.in_progress.get('tool')!r} ({short(e)}): "
                f"check `git -C {sess.where.workspace_path} status`, remove a stale lock file if a git process "
                "was killed, then call again") from e


def recover(sess: Session) -> None:
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
    job = sess.books.state.in_progress
    if not job:
        return
    tool, done = job.get("tool"), "stale marker cleared"
    if tool == "save_and_test" and job.get("attempt"):
        done = _recover_attempt(sess, int(job["attempt"]))
    elif tool == "commit_improvement" and job.get("attempt"):
        done = _recover_commit(sess, int(job["attempt"]), job)
    elif tool == "baseline":
        done = _recover_baseline(sess, job.get("base") or sess.books.state.best.commit)
    elif tool == "stop":
        done = _recover_stop(sess, job.get("base") or sess.books.state.best.commit)
    sess.books.record("recovered", job=job, action=done)
    sess.books.state.end_job()
    sess.books.save()


def _recover_attempt(sess: Session, n: int) -> str:
    s = sess.books.state
    if (s.last and s.last.attempt == n) or (s.phase == Phase.improved and s.pending and s.pending.attempt == n):
        return "the verdict was saved: nothing to undo"
    found = sess.books.store.find_patch(n)
    if found is None:
        patch, _ = vcs.diff_against(sess.where.ws, s.best.commit)
        path = sess.books.store.archive(n, "interrupted", patch)
        label = "none"
    else:
        label = found.name[len(f"{n:04d}-"):-len(".patch")]
        path = sess.books.store.relabel(n, label, "interrupted") if label != "interrupted" else found
    vcs.reset_to(sess.where.ws, s.best.commit)
    faults.point("recover.after_reset")
    s.dropped_candidate()
    sess.books.record("attempt", attempt=n, verdict="interrupted", code=str(Code.INTERRUPTED), reverted=True,
                      patch=str(path),
                      reason=f"the server was killed during save_and_test (patch was labelled {label!r}); "
                      "the candidate was archived and the tree reset to BEST_COMMIT")
    return f"attempt {n} archived as interrupted, tree reset to BEST_COMMIT"


def _recover_commit(sess: Session, n: int, job: dict) -> str:
    s, p = sess.books.state, sess.books.state.pending
    if s.phase != Phase.improved or p is None or p.attempt != n:
        return "the commit was saved: nothing to undo"
    head = vcs.head_sha(sess.where.ws)
    if head != s.best.commit and is_commit_of(sess, head, n):
        with best_lock(sess):
            shared = read_shared(sess.where)
            # published already: by this slot (killed between publishing and saving), else it is another
            # slot's commit that moved the BEST line (the main slot's branch) under this slot's dead commit
            mine = shared is not None and shared["commit"] == head and shared.get("by", sess.where.slot or "main") == (
                sess.where.slot or "main")
            if shared is None or shared["commit"] == s.best.commit or mine:
                sess.where.ws.git.reset("-q")
                # judged against an older BEST (another slot committed since): re-applied, as the record says
                moved = {"reapplied_from": p.base} if p.base and p.base != s.best.commit else {}
                # the verdict's runs of this tree start the new BEST's record (re-applied: another tree, none)
                s.record_best_runs([] if moved else list(p.candidate_run_metrics), new_best=True)
                adopt_best(sess, n, head, job.get("metrics") or p.candidate_metrics,
                           job.get("gpu_us", p.candidate_gpu_us), recovered=True, rows=job.get("rows") or [],
                           overtaken_rounds=int(job.get("overtaken_rounds", 0)), **moved)
                return f"adopted commit {head[:12]} of attempt {n} as BEST_COMMIT"
        # another slot moved BEST after this commit was made and before it was published: adopting
        # it would drop that slot's keep from the BEST line. The commit stays unadopted; the tested
        # tree comes back and commit_improvement re-applies it onto the newest BEST.
        if sess.where.slot:  # a slot's own branch goes back (the main slot's branch is the BEST line: it moved on)
            vcs.reset_to(sess.where.ws, s.best.commit)
        vcs.restore_tree(sess.where.ws, p.tree)
        return (f"commit {head[:12]} of attempt {n} was made on {s.best.commit[:12]}, but another slot moved BEST to "
                f"{shared['commit'][:12]} before it was published: not adopted; the tested tree is restored, phase "
                "stays improved (commit_improvement re-applies it onto the newest BEST)")
    try:
        vcs.restore_tree(sess.where.ws, p.tree)
    except git.GitCommandError as e:  # the tree object is gone (gc): keep the files, clear the index
        sess.where.ws.git.reset("-q")
        return f"could not restore the tested tree ({e}); index reset, files left as they are"
    return f"restored the tested tree of attempt {n}; phase stays improved"


def _recover_baseline(sess: Session, base: str) -> str:
    s = sess.books.state
    if s.phase != Phase.needs_baseline:
        return "the baseline was saved: nothing to undo"
    head = sess.where.ws.head.commit
    dropped = ""
    if head.hexsha != base and head.message.strip() == BASELINE_MESSAGE and [c.hexsha for c in head.parents] == [base]:
        sess.where.ws.git.reset("-q", "--soft", base)  # the commit goes; the files stay as they are
        dropped = f"dropped the half-done baseline commit {head.hexsha[:12]}; "
        unpublish(sess, head.hexsha)  # slots must not adopt a baseline that is gone
    restore_performance_md(sess.where, base)
    s.best.commit = base
    return f"{dropped}performance.md restored; run_benchmark records the baseline again"


def adopt_best(sess: Session, attempt: int, sha: str, metrics: dict[str, float], gpu_us: float | None,
               neutral: bool = False, **log_fields) -> None:
    """A keep is committed as `sha`: BEST_COMMIT moves there with its metrics (SessionState.adopted),
    the BEST worktree follows, counters reset, the `commit` record (with `rows`, its performance.md
    rows; `code`: why it was kept, script_only for a keep only the script metric decided) is queued; a
    `neutral` keep (referee/neutral.py) counts as one, never as a kept improvement. The caller saves
    the state (the commit point)."""
    vcs.ensure_best_worktree(sess.where.repo, sess.where.best_path, sha)
    faults.point("commit_improvement.after_best_worktree")
    script_only = bool(sess.books.state.pending and sess.books.state.pending.script_only)
    old = sess.books.state.adopted(sha, metrics, gpu_us, neutral=neutral)
    with best_lock(sess):
        publish(sess)  # the session's BEST: the BEST line's branch and best.json
    code = Code.SCRIPT_ONLY.value if script_only else log_fields.pop("code", None)
    sess.books.record("commit", attempt=attempt, commit=sha, previous=old, metrics=metrics, gpu_us=gpu_us, code=code,
                      **{k: v for k, v in log_fields.items() if k != "code"})


def is_commit_of(sess: Session, sha: str, n: int) -> bool:
    """True if `sha` is commit_improvement's commit of attempt `n` on top of BEST_COMMIT."""
    c = sess.where.ws.commit(sha)
    return f"kopt-mcp attempt {n}, " in c.message and [x.hexsha for x in c.parents] == [sess.books.state.best.commit]


def stop(sess: Session, reason: str, gain_note: str = "") -> None:
    """Stop the session: state `stopped`, the `stopped` record (with the Stop Summary) queued,
    performance.md rendered from the ledger and committed, then the record committed. `gain_note`:
    why the Stop Summary has no measured session gain, where the caller knows (end_session: no keep,
    no device); "" for the summary's default line.

    The stopped state is saved first, with an in-progress marker (carrying `gain_note`): a server
    killed while writing or committing the summary finishes it on restart (`_recover_stop`), exactly once."""
    s = sess.books.state
    if not s.stopped_now(reason):
        return
    outer = s.in_progress
    s.begin_job("stop", base=s.best.commit, **({"gain_note": gain_note} if gain_note else {}))
    sess.books.save()
    _write_stop_summary(sess)
    s.in_progress = outer
    sess.books.save()


def _write_stop_summary(sess: Session, commit: bool = True) -> None:
    """Queue the `stopped` record (with the Stop Summary text), render performance.md from the
    ledger and, with `commit`, commit it on top of BEST_COMMIT."""
    s = sess.books.state
    gain = latest_gain(sess.books.store.ledger(), s.best.commit)  # measure_session_gain's, when one was measured
    note = str((s.in_progress or {}).get("gain_note") or "")  # stop(gain_note=...): why none was measured
    sess.books.record("stopped", reason=s.stop_reason, best_commit=s.best.commit,
                      summary=stop_summary(s, sess.what.config.target.benchmark.metric, gain, note))
    if not commit:
        return
    sess.write_performance()
    faults.point("stop.after_perf_written")
    try:
        vcs.commit_paths(sess.where.ws, ["performance.md"], f"{STOP_MESSAGE} ({(s.stop_reason or '')[:60]})")
    except git.GitCommandError as e:
        sess.books.store.log("stop_summary_commit_failed", error=str(e))
    faults.point("stop.after_git_commit")


def restore_performance_md(where: Where, base: str) -> None:
    """Unstage everything and put performance.md back as it is in `base` (absent there: removed)."""
    where.ws.git.reset("-q")
    try:
        where.ws.git.checkout(base, "--", "performance.md")
    except git.GitCommandError:
        (where.workspace_path / "performance.md").unlink(missing_ok=True)


def _recover_stop(sess: Session, base: str) -> str:
    if sess.books.state.phase != Phase.stopped:
        return "the session did not stop: nothing to finish"
    head = sess.where.ws.head.commit
    if head.message.startswith(STOP_MESSAGE) and [c.hexsha for c in head.parents] == [base]:
        _write_stop_summary(sess, commit=False)  # the committed summary is the one recorded
        return "the Stop Summary was committed; its ledger record written"
    restore_performance_md(sess.where, base)  # undo a summary written but not committed, then write it once
    _write_stop_summary(sess)
    return "wrote and committed the Stop Summary the killed server had not finished"


def clear_stale_locks(where: Layout, books: Books) -> None:
    """Remove git lock files a killed git process left in the session's OWN worktrees and refs
    (index.lock, HEAD.lock, the branch's ref lock), unless a git process runs in that worktree
    (the agent's own git command); the repository-wide ones (packed-refs.lock, the main
    checkout's index.lock) only while no git process runs at all. Logged to the ledger."""
    common = where.kopt_dir.parent
    busy: list[Path] = []  # working folders of running git processes
    for proc in psutil.process_iter(["name", "cmdline"]):
        # GitPython's long-lived `git cat-file` readers (this server's too) never hold a lock
        if proc.info.get("name") == "git" and "cat-file" not in (proc.info.get("cmdline") or [])[1:2]:
            try:
                busy.append(Path(proc.cwd()).resolve())
            except (psutil.NoSuchProcess, psutil.ZombieProcess, FileNotFoundError):
                continue  # it ended meanwhile (another test's or tool's short git command): it holds no lock
            except (psutil.Error, OSError):
                busy.append(Path("/"))  # unknown: treat as running everywhere

    def idle(folder: Path) -> bool:
        return not any(b == folder or folder in b.parents or b == Path("/") for b in busy)

    locks: list[Path] = []
    if idle(where.workspace_path) and idle(where.repo_path):
        locks.append(common / "refs" / "heads" / f"{where.branch}.lock")
    for wt in (where.workspace_path, where.best_path):
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
            books.problems.append(f"stale git lock {lock} could not be removed ({e}): remove it by hand")
    if removed:
        books.store.log("stale_git_locks_removed", paths=removed)


def lease_or_stop(sess: Session, progress: Progress | None) -> GateOutcome:
    """`jobs.lease` (parts/jobs.py); with no device after the whole wait the session stops at once (reason `no
    idle GPU: ...`, Stop Summary written) and the outcome, without a lease, is returned. Raises
    Cancelled when the client cancelled the wait."""
    outcome = sess.jobs.lease(progress)
    if outcome.lease is None:
        stop(sess, f"no idle GPU: {outcome.reason}")
    return outcome
