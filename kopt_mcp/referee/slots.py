"""Candidate slots: several agents (one server process each, `kopt-mcp serve --slot NAME`) on one
session and one BEST line.

A slot is a Session of its own: workspace `.kopt/worktrees/<tag>@<slot>` on branch
`kopt-slot/<tag>/<slot>`, state folder `<git-common-dir>/kopt/<tag>/slots/<slot>/` (state.json with
its phase, repair counter, pending verdict and regression counter; its own hash-chained ledger;
attempts; runs), attempt refs `refs/kopt/<tag>/<slot>/attempts/NNNN`, and a server lock of its own
(one process per slot). The main slot (no name) is the session as it always was: its workspace
`.kopt/worktrees/<tag>` is on the BEST line's branch `kernel-opt/<tag>` itself.

What the slots share is BEST: `<git-common-dir>/kopt/<tag>/best.json` (commit, per-class metrics,
GPU time, kernels, the baseline's noise estimates), changed only under the cross-process lock
`best.lock` by the serialized commit step (and the baseline), which also moves the branch
`kernel-opt/<tag>`. Before every operation a slot syncs (`sync`): when BEST moved, its state takes
the new BEST and its workspace's candidate is re-applied onto it (git three-way merge; overlapping
edits: the verdict `conflict`, archived). An `improved` candidate is left as it is: commit_improvement
re-applies and re-measures it against the newest BEST, then commits under the lock only if BEST has
not moved again meanwhile (referee/commit.py).
Measuring runs outside the lock (only the job lease is held), so slots measure concurrently on
distinct GPUs. performance.md is rendered from every slot's ledger (`shared_events`).
"""

from __future__ import annotations

import contextlib
import json
from contextlib import contextmanager
from pathlib import Path

from kopt_mcp import vcs
from kopt_mcp.ledger import atomic_write
from kopt_mcp.referee.parts.where import Layout
from kopt_mcp.referee.reapply import reapply
from kopt_mcp.rules.decision import Code
from kopt_mcp.session import Phase
from kopt_mcp.testing import faults

BEST_FILE = "best.json"


def session_root(where: Layout) -> Path:
    """The session's shared folder `<git-common-dir>/kopt/<tag>/` (the main slot's state folder)."""
    return where.kopt_dir / where.tag


@contextmanager
def best_lock(sess):
    """The cross-process lock of the shared BEST (blocking; reentrant for one session; released on
    exit). Each session holds its own lock object, so two slots in one process exclude each other too."""
    session_root(sess.where).mkdir(parents=True, exist_ok=True)
    with sess.shared_lock:
        yield


def read_shared(where: Layout) -> dict | None:
    """The shared BEST (best.json) or None when no slot has written it yet (a session without slots)."""
    try:
        data = json.loads((session_root(where) / BEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("commit") else None


def publish(sess) -> None:
    """Make this slot's BEST the session's: move the branch `kernel-opt/<tag>` to it (a slot's own
    branch is not the BEST line) and write best.json (atomic). Call under `best_lock`."""
    s, where = sess.books.state, sess.where
    if where.slot:
        where.repo.git.update_ref("-m", f"kopt-mcp: slot {where.slot} moves BEST", f"refs/heads/kernel-opt/{where.tag}",
                                  s.best.commit)
    faults.point("slots.after_best_branch")
    atomic_write(session_root(sess.where) / BEST_FILE, json.dumps({
        "commit": s.best.commit, "metrics": s.best.metrics, "gpu_us": s.best.gpu_us, "kernels": s.best.kernels,
        "noise_history": s.noise_history, "gpu_spreads_pct": s.gpu_spreads_pct,
        "benchmark_outputs": s.benchmark_outputs, "by": sess.where.slot or "main"}, indent=1) + "\n")


def unpublish(sess, commit: str) -> None:
    """Recovery dropped `commit` (a half-done baseline): remove best.json when it names it (under
    `best_lock`), and move the BEST line's branch back when a slot had moved it there."""
    with best_lock(sess):
        shared = read_shared(sess.where)
        if shared is not None and shared["commit"] == commit:
            (session_root(sess.where) / BEST_FILE).unlink(missing_ok=True)
            if sess.where.slot:
                sess.where.repo.git.update_ref(f"refs/heads/kernel-opt/{sess.where.tag}", sess.books.state.best.commit)


def sync(sess) -> str | None:
    """Bring this slot to the shared BEST when another slot moved it (see module docstring).
    Returns what was done (also logged), or None when BEST had not moved. Raises git errors."""

    s = sess.books.state

    def moved(shared: dict | None) -> bool:
        return shared is not None and (shared["commit"] != s.best.commit or s.phase == Phase.needs_baseline)

    if not moved(read_shared(sess.where)):
        return None
    with best_lock(sess):
        shared = read_shared(sess.where)
        if not moved(shared):
            return None
        old, new = s.best.commit, shared["commit"]

        if s.phase == Phase.improved:  # commit_improvement re-applies it inside the commit step
            done = "the improved candidate stays; commit_improvement re-applies it onto the newest BEST"
        elif old == new:  # a new slot, made from the session's BEST: nothing to move
            done = "adopted the session's baseline"
        else:  # edits made before this slot heard of the move are re-applied, never dropped
            done = _rebase_workspace(sess, old, new)
        s.best_moved(new, shared.get("metrics") or {}, shared.get("gpu_us"), shared.get("kernels") or [])
        if not s.noise_history:
            s.noise_history = list(shared.get("noise_history") or [])
        if not s.gpu_spreads_pct:
            s.gpu_spreads_pct = list(shared.get("gpu_spreads_pct") or [])
        s.benchmark_outputs = sorted({*s.benchmark_outputs, *(shared.get("benchmark_outputs") or [])})
        sess.books.record("best_moved", previous=old, best_commit=new, by=shared.get("by"), action=done)
        sess.books.save()
    with contextlib.suppress(Exception):  # measuring uses snapshots; the BEST worktree is for people
        vcs.ensure_best_worktree(sess.where.repo, sess.where.best_path, new)
    return done


def _rebase_workspace(sess, old: str, new: str) -> str:
    """The workspace's change against `old` re-applied onto `new`: clean -> the workspace holds
    the merged tree; a conflict -> archived as a `conflict` attempt, workspace reset to `new`, a
    repair dropped. A clean workspace is simply reset to `new`."""

    s = sess.books.state
    tree = vcs.snapshot(sess.where.ws, old, s.benchmark_outputs).tree
    if tree == vcs.tree_of(sess.where.ws, old):
        vcs.reset_to(sess.where.ws, new)
        return "workspace reset to the newest BEST"
    frozen = vcs.freeze(sess.where.ws, tree, old, f"{sess.where.ref_prefix}/sync",
                        "kopt-mcp: the workspace when BEST moved")
    out = reapply(sess.where.ws, frozen, new)
    if out.tree is not None:
        vcs.reset_to(sess.where.ws, new)
        vcs.restore_tree(sess.where.ws, out.tree)
        return "the workspace's change was re-applied onto the newest BEST"
    n = s.new_attempt()
    target = s.repair.target if s.repair else "global"
    patch, changed = vcs.diff_tree(sess.where.ws, old, tree)
    path = sess.books.store.archive(n, "conflict", patch)
    vcs.reset_to(sess.where.ws, new)
    reason = (f"BEST moved from {old[:12]} to {new[:12]} (another slot committed) and the workspace's change "
              f"overlaps it in {', '.join(out.conflicts) or 'some files'}: archived as {path.name}, the workspace "
              "is reset to the newest BEST")
    s.dropped_candidate()
    s.ruled(n, "conflict", target, reason)
    sess.books.record("attempt", attempt=n, verdict="conflict", code=str(Code.CONFLICT), reason=reason, changed=changed,
                      patch=str(path), reverted=True, judged_against=old, best_commit=new)
    return reason


def shared_events(sess) -> list[dict]:
    """The records performance.md is rendered from across slots: this slot's `session_started`,
    then every slot's `baseline`, `commit` and `stopped` records, oldest first."""
    own = sess.books.store.ledger()
    if not (session_root(sess.where) / "slots").is_dir():
        return own  # a session without slots: its own ledger, as always
    keep = ("baseline", "commit", "stopped")
    root = session_root(sess.where)
    paths = [root / "ledger.jsonl", *sorted((root / "slots").glob("*/ledger.jsonl"))]
    rows: dict[str, dict] = {}
    started: list[dict] = []  # the text the session started from: the first slot's (a later slot starts
    for p in paths:           # from a BEST whose performance.md has rows already)
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and e.get("event") in keep:
                rows[e.get("id") or line] = e
            elif isinstance(e, dict) and e.get("event") == "session_started" and not started:
                started = [e]
    started = started or [e for e in own if e.get("event") == "session_started"][:1]
    return started + sorted(rows.values(), key=lambda e: str(e.get("at") or ""))


def slots_status(where: Layout) -> list[dict]:
    """Every slot of the session: name, phase, attempts, kept, consecutive regressions, last verdict."""
    out = []
    states = [("main", session_root(where) / "state.json"),
              *((p.parent.name, p) for p in sorted((session_root(where) / "slots").glob("*/state.json")))]
    for name, p in states:
        try:
            st = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        last = st.get("last") or {}
        out.append({"slot": name, "phase": st.get("phase"), "attempts": int(st.get("next_attempt") or 1) - 1,
                    "kept": st.get("kept", 0),
                    "consecutive_regressions": (st.get("regressions") or {}).get("consecutive", 0),
                    "last_verdict": last.get("verdict"), "workspace": st.get("workspace"),
                    "best_commit": (st.get("best") or {}).get("commit")})
    return out
