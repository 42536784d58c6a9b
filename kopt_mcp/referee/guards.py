"""The integrity guards applied to every run's checkout and to the workspace: which paths are fixed
for the session (`protected_paths`), what a run changed in its disposable checkout
(`judge_run_changes`: a protected file raises Tampered), and whether the workspace moved while the
candidate was measured (`workspace_moved`)."""

from __future__ import annotations

from pathlib import Path

from kopt_mcp import vcs
from kopt_mcp.errors import Tampered
from kopt_mcp.referee.core import Session
from kopt_mcp.rules.protect import FileChange, describe, run_changes_verdict


def protected_paths(sess: Session) -> list[str]:
    """[protect] paths plus the config file (when it lies inside the repository)."""
    paths = list(sess.cfg.protect.paths)
    try:
        paths.append(Path(sess.config.path).relative_to(sess.repo_path).as_posix())
    except ValueError:
        pass
    return paths


def judge_run_changes(sess: Session, changes: list[FileChange], who: str) -> list[FileChange]:
    """What one run changed in its checkout. A protected path (benchmark, oracle, config,
    performance.md) raises Tampered naming it ("the run rewrote bench.py"). A run of unchanged
    BEST_COMMIT (`who` starts with "the run of BEST") adds its other changes to the session's
    benchmark outputs (logged). Returns the remaining changes, benchmark outputs left out."""
    s = sess.state
    reason, rest = run_changes_verdict(changes, protected_paths(sess), s.benchmark_outputs, who)
    if reason:
        raise Tampered(reason)
    if rest and who.startswith("the run of BEST"):
        new = sorted({c.path for c in rest} - set(s.benchmark_outputs))
        s.benchmark_outputs = sorted({*s.benchmark_outputs, *new})
        sess.store.log("benchmark_outputs", added=new, outputs=s.benchmark_outputs)
        return []
    return rest


def workspace_moved(sess: Session, tree: str) -> str | None:
    """A rejection reason when the workspace no longer holds snapshot `tree` (outputs aside): a
    run wrote outside its own checkout (or the workspace was edited while it was measured);
    None when it is intact."""
    now = sess.workspace_tree()
    if now == tree:
        return None
    what = describe(vcs.tree_changes(sess.ws, tree, now), "it")
    return (f"the run changed the workspace {sess.workspace_path} outside its own checkout ({what}), or the "
            "workspace was edited while it was measured: the tested snapshot is archived, nothing written "
            "during the run is kept")


def run_note(sess: Session, changes: list[FileChange]) -> str:
    """A note on what a run without a verdict (check, trace, warm-up) changed in its checkout;
    a protected file is named as save_and_test would reject it. Empty when nothing changed."""
    try:
        rest = judge_run_changes(sess, changes, "the run")
    except Tampered as e:
        return f"{str(e).split(':')[0]} (save_and_test rejects a candidate whose run does this)"
    return (describe(rest) + " in its disposable checkout (nothing in the workspace changed)") if rest else ""
