"""The integrity guards applied to every run's checkout and to the workspace: which paths are fixed
for the session (`protected_paths`), what a run changed in its disposable checkout
(`judge_run_changes`: a protected file raises Tampered), whether the workspace moved while the
candidate was measured (`workspace_moved`), and the evidence of the shadowing rule (`shadowing`)."""

from __future__ import annotations

import os
import posixpath
import shlex
from pathlib import Path

from kopt_mcp import vcs
from kopt_mcp.bench.modules import module_names
from kopt_mcp.errors import Tampered
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.parts import Layout, What
from kopt_mcp.rules.decision import Decision
from kopt_mcp.rules.protect import FileChange, describe, run_changes_verdict
from kopt_mcp.rules.shadowing import own_modules, shadowing_decision, shadowing_files


def protected_paths(what: What, where: Layout) -> list[str]:
    """[protect] paths plus the config file (when it lies inside the repository), relative to it."""
    paths = list(what.cfg.protect.paths)
    try:
        paths.append(Path(what.config.path).relative_to(where.repo_path).as_posix())
    except ValueError:
        pass
    return paths


def judge_run_changes(sess: Session, changes: list[FileChange], who: str) -> list[FileChange]:
    """What one run changed in its checkout. A protected path (benchmark, oracle, config,
    performance.md) raises Tampered naming it ("the run rewrote bench.py"). A run of unchanged
    BEST_COMMIT (`who` starts with "the run of BEST") adds its other changes to the session's
    benchmark outputs (logged). Returns the remaining changes, benchmark outputs left out."""
    s = sess.books.state
    reason, rest = run_changes_verdict(changes, protected_paths(sess.what, sess.where), s.benchmark_outputs, who)
    if reason:
        raise Tampered(reason)
    if rest and who.startswith("the run of BEST"):
        new = sorted({c.path for c in rest} - set(s.benchmark_outputs))
        s.benchmark_outputs = sorted({*s.benchmark_outputs, *new})
        sess.books.store.log("benchmark_outputs", added=new, outputs=s.benchmark_outputs)
        return []
    return rest


def workspace_moved(sess: Session, tree: str) -> str | None:
    """A rejection reason when the workspace no longer holds snapshot `tree` (outputs aside): a
    run wrote outside its own checkout (or the workspace was edited while it was measured);
    None when it is intact."""
    now = sess.workspace_tree()
    if now == tree:
        return None
    what = describe(vcs.tree_changes(sess.where.ws, tree, now), "it")
    return (f"the run changed the workspace {sess.where.workspace_path} outside its own checkout ({what}), or the "
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


def sys_path_roots(command: str, workdir: str) -> set[str]:
    """The repository folders a benchmark `command` run in `workdir` puts first on sys.path: the
    workdir itself (`python -m`, `-c`) and the folder of every `.py` script the command names
    (`python bench/run.py`); repo-relative posix ("" is the root)."""
    base = posixpath.normpath(workdir.strip("/") or ".")
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    roots = {base}
    for w in words:
        if w.endswith(".py") and not w.startswith("/"):
            roots.add(posixpath.normpath(posixpath.join(base, posixpath.dirname(w) or ".")))
    return {"" if r == "." else r for r in roots if not r.startswith("..")}


def shadowing(sess: Session, tree: str, best_tree: str) -> Decision | None:
    """Gather the evidence of rules.shadowing for candidate tree `tree` against BEST's `best_tree`
    (the diff with each file's status, both trees' packages, the benchmark's sys.path roots, and
    the module names of the benchmark's interpreter, asked once per session: `sess.jobs.module_names`)
    and rule: a `rejected` Decision (code `shadowing`) or None."""
    changes = vcs.tree_changes(sess.where.ws, best_tree, tree)
    if all(c.kind == "deleted" for c in changes):
        return None
    b = sess.what.cfg.benchmark
    if sess.jobs.module_names is None:
        sess.jobs.module_names = module_names(b.command, {**os.environ, **sess.env()}, sess.where.repo_path / b.workdir)
    roots = sys_path_roots(b.command, b.workdir)
    files, best_files = vcs.tree_files(sess.where.ws, tree), vcs.tree_files(sess.where.ws, best_tree)
    packages = {posixpath.dirname(f) for f in files if posixpath.basename(f) == "__init__.py"}
    best_packages = {posixpath.dirname(f) for f in best_files if posixpath.basename(f) == "__init__.py"}
    names = sess.jobs.module_names
    hits = shadowing_files(changes, names, packages, roots, own_modules(best_files, best_packages, roots))
    return shadowing_decision(hits, names.python)
