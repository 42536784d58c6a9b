"""The Session in parts (issue 37 item 2): opening builds a Session whole from parts with one job
each (kopt_mcp/referee/parts/), never filling one in afterwards, and each part imports only what its
job needs. The checkers are shown to find a planted violation."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import kopt_mcp
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.parts import Books, Jobs, What, Where

REFEREE = Path(kopt_mcp.__file__).parent / "referee"

#: the imports each part may have beyond the standard library: its job's, nothing else
PART_IMPORTS = {
    "where.py": {"git", "kopt_mcp.vcs", "kopt_mcp.errors", "kopt_mcp.paths"},
    "what.py": {"kopt_mcp.config", "kopt_mcp.rules.policy"},
    "books.py": {"kopt_mcp.errors", "kopt_mcp.ledger", "kopt_mcp.session", "kopt_mcp.testing"},
    "jobs.py": {"kopt_mcp.bench.executor", "kopt_mcp.errors", "kopt_mcp.gpus.gate", "kopt_mcp.results",
                "kopt_mcp.rules.shadowing"},
}
#: what a built Session holds: its parts, the services, and its locks
SESSION_FIELDS = {"where", "what", "books", "jobs", "services", "server_lock", "lock", "shared_lock"}


def session_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names in `fn` bound to a Session: parameters annotated `Session` (or a subclass named
    `...Session`/`Referee`), and variables assigned from a call to `Session(...)`."""
    names = {a.arg for a in [*fn.args.args, *fn.args.kwonlyargs]
             if a.annotation is not None and ast.unparse(a.annotation).strip("'\"") in ("Session", "Referee")}
    for node in ast.walk(fn):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and ast.unparse(node.value.func) in ("Session", "Referee")):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def fills_in(source: str) -> list[str]:
    """`function: line` for every attribute set on a Session in `source` after it was built:
    `sess.x = ...`, `sess.x += ...`, `sess.x: T = ...`, `setattr(sess, ...)`, `sess.__dict__[...] = ...`."""
    out = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = session_names(fn)
        for node in ast.walk(fn):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                base = t.value if isinstance(t, (ast.Attribute, ast.Subscript)) else None
                if isinstance(base, ast.Attribute) and base.attr == "__dict__":
                    base = base.value
                if isinstance(base, ast.Name) and base.id in names:
                    out.append(f"{fn.name}: {ast.unparse(t)}")
            if (isinstance(node, ast.Call) and ast.unparse(node.func) == "setattr" and node.args
                    and isinstance(node.args[0], ast.Name) and node.args[0].id in names):
                out.append(f"{fn.name}: {ast.unparse(node)}")
    return out


def foreign_imports(source: str, allowed: set[str]) -> list[str]:
    """The imports in `source` (`module` or `module.name`) outside the standard library and `allowed`
    (a module, or a package holding it), `__future__` and TYPE_CHECKING blocks aside."""
    tree = ast.parse(source)
    skip = {id(n) for node in tree.body if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [f"{node.module}.{a.name}" for a in node.names]
    return sorted({m for m in found if not m.startswith("__future__.")
                   and m.split(".")[0] not in sys.stdlib_module_names
                   and not any(m == a or m.startswith(a + ".") for a in allowed)})


def test_opening_never_fills_in_a_built_session():
    assert fills_in((REFEREE / "opening.py").read_text(encoding="utf-8")) == []


def test_the_fill_in_finder_finds_planted_ones():
    planted = ("def open_session(sess: Session, x):\n    sess.state = x\n    sess.problems += []\n"
               "    setattr(sess, 'cfg', x)\n    sess.__dict__['policy'] = x\n    sess.books.state = x\n"
               "def other(repo):\n    s = Session(repo)\n    s.ws = None\n    t = object()\n    t.ws = None\n")
    assert sorted(fills_in(planted)) == ["open_session: sess.__dict__['policy']", "open_session: sess.problems",
                                         "open_session: sess.state", "open_session: setattr(sess, 'cfg', x)",
                                         "other: s.ws"]


def test_each_part_imports_only_what_its_job_needs():
    for name, allowed in PART_IMPORTS.items():
        assert foreign_imports((REFEREE / "parts" / name).read_text(encoding="utf-8"), allowed) == [], name


def test_the_import_finder_finds_a_planted_executor_in_where(tmp_path):
    source = (REFEREE / "parts" / "where.py").read_text(encoding="utf-8")
    planted = source.replace("import git\n", "import git\nfrom kopt_mcp.bench.executor import Executor\n"
                             "from kopt_mcp.referee.parts.jobs import Jobs\n", 1)
    assert foreign_imports(planted, PART_IMPORTS["where.py"]) == ["kopt_mcp.bench.executor.Executor",
                                                                  "kopt_mcp.referee.parts.jobs.Jobs"]


def test_an_opened_session_holds_its_parts_whole(toy_repo, make_referee):
    r = make_referee(toy_repo, tag="p")
    assert set(vars(r)) == SESSION_FIELDS
    assert isinstance(r, Session)
    assert (type(r.where), type(r.what), type(r.books), type(r.jobs)) == (Where, What, Books, Jobs)
    assert r.where.ws.active_branch.name == r.where.branch == r.books.state.branch == "kernel-opt/p"
    workspace = toy_repo.resolve() / ".kopt" / "worktrees" / "p"
    assert Path(r.where.ws.working_tree_dir) == r.where.workspace_path == workspace
    assert r.what.cfg is r.what.config.target and r.books.state.config_sha256 == r.what.config.sha256
    assert r.books.store.root == r.where.state_dir and r.jobs.executor is not None and r.jobs.job is None
    assert r.where.best_path.is_dir()  # the BEST worktree, checked out at start
