"""The package's shape, checked: no import cycles, the rules stay pure, evidence never imports the
referee, and every function-level import of kopt_mcp says why it is not at the top.

Layers (docs/architecture.md): `bench/` (evidence: run and profile a snapshot) never imports
`referee/`; `rules/` (decisions) imports none of pandas, git, MCP, `gpus/`, `bench/`, `referee/`,
`profilers/`; `profilers/` imports no `rules/`; `evidence/` (the typed evidence below both) imports
only `errors` and itself.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import kopt_mcp
from tests.import_cycles import cycles

PKG = Path(kopt_mcp.__file__).parent
#: runs as a standalone script (`python -I`), or inside the benchmark's process: no kopt_mcp imports
STANDALONE = {"kopt_mcp.bench.contain", "kopt_mcp.profilers.cupti_collect"}


def _modules() -> dict[str, Path]:
    out = {}
    for p in PKG.rglob("*.py"):
        rel = p.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        if "cupti_inject" not in name:
            out[name] = p
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(path: Path) -> list[tuple[str, bool, int]]:
    """(imported kopt_mcp module, at module level?, line) for every import outside TYPE_CHECKING."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    top = {id(n) for n in tree.body}
    for node in tree.body:  # try/except ImportError at module level is still module level
        if isinstance(node, ast.Try):
            top.update(id(n) for n in node.body)
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("kopt_mcp"):
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("kopt_mcp")]
        for n in names:
            r = _resolve(n)
            if r:
                out.append((r, id(node) in top, node.lineno))
    return out


def _graph() -> dict[str, set[str]]:
    g: dict[str, set[str]] = defaultdict(set)
    for name, path in MODULES.items():
        for target, _, _ in _imports(path):
            if target != name and not name.startswith(target + "."):  # a module and its own package face
                g[name].add(target)
    return g


def test_the_package_has_no_import_cycle():
    assert cycles(_graph()) == []


def test_the_cycle_finder_finds_a_planted_cycle():
    g = {"kopt_mcp.a": {"kopt_mcp.b"}, "kopt_mcp.b": {"kopt_mcp.c"}, "kopt_mcp.c": {"kopt_mcp.a"}}
    assert cycles(g) == [["kopt_mcp.a", "kopt_mcp.b", "kopt_mcp.c"]]
    assert cycles({"kopt_mcp.a": {"kopt_mcp.b"}, "kopt_mcp.b": set()}) == []


def test_bench_and_rules_never_import_the_referee():
    g = _graph()
    bad = {m: sorted(t for t in g[m] if t.startswith(("kopt_mcp.referee", "kopt_mcp.app")))
           for m in MODULES if m.startswith(("kopt_mcp.bench", "kopt_mcp.rules", "kopt_mcp.profilers"))}
    assert {m: t for m, t in bad.items() if t} == {}


def _edges(g: dict[str, set[str]], src: str, banned: tuple[str, ...]) -> dict[str, list[str]]:
    """module of package `src` -> the modules it imports that start with one of `banned` (only non-empty)."""
    bad = {m: sorted(t for t in g[m] if t.startswith(banned)) for m in MODULES if m.startswith(src)}
    return {m: t for m, t in bad.items() if t}


def test_evidence_sits_below_rules_and_profilers():
    """evidence/ imports only errors and itself; rules/ imports no profilers/ (nor bench/, gpus/,
    readers/); profilers/ imports no rules/: the two meet only in evidence/ below both."""
    g = _graph()
    outside = {m: sorted(t for t in g[m] if not t.startswith(("kopt_mcp.evidence", "kopt_mcp.errors")))
               for m in MODULES if m.startswith("kopt_mcp.evidence")}
    assert {m: t for m, t in outside.items() if t} == {}
    assert _edges(g, "kopt_mcp.rules", ("kopt_mcp.profilers", "kopt_mcp.bench", "kopt_mcp.gpus",
                                        "kopt_mcp.readers")) == {}
    assert _edges(g, "kopt_mcp.profilers", ("kopt_mcp.rules",)) == {}
    assert "kopt_mcp.evidence.trace" in MODULES  # the check looks at a package that exists


def test_the_edge_finder_finds_a_planted_edge():
    g = defaultdict(set, {"kopt_mcp.rules.keep": {"kopt_mcp.profilers.base", "kopt_mcp.rules.pairing"}})
    assert _edges(g, "kopt_mcp.rules", ("kopt_mcp.profilers",)) == {"kopt_mcp.rules.keep": ["kopt_mcp.profilers.base"]}


def test_rules_import_no_io_layer_statically():
    g = _graph()
    banned = ("kopt_mcp.gpus", "kopt_mcp.bench", "kopt_mcp.referee", "kopt_mcp.app", "kopt_mcp.readers",
              "kopt_mcp.views", "kopt_mcp.commands", "kopt_mcp.vcs", "kopt_mcp.ledger")
    bad = {m: sorted(t for t in g[m] if t.startswith(banned)) for m in MODULES if m.startswith("kopt_mcp.rules")}
    assert {m: t for m, t in bad.items() if t} == {}
    third = ("pandas", "git", "mcp", "subprocess", "psutil", "numpy")
    for name, path in MODULES.items():
        if not name.startswith("kopt_mcp.rules"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            mods = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [m for m in mods if m.split(".")[0] in third], (name, mods)


def test_importing_every_rule_loads_no_io_library():
    """In a fresh interpreter: every kopt_mcp.rules module imported, and none of pandas, git, MCP,
    kopt_mcp.gpus / bench / referee / app came with it."""
    rules = sorted(m for m in MODULES if m.startswith("kopt_mcp.rules"))
    code = ("import importlib, json, sys\n"
            f"for m in {rules!r}: importlib.import_module(m)\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in ('pandas', 'git', 'mcp') or "
            "m.startswith(('kopt_mcp.gpus', 'kopt_mcp.bench', 'kopt_mcp.referee', 'kopt_mcp.app')))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=str(PKG.parent))
    assert json.loads(out.stdout) == []


def test_function_level_imports_say_why():
    """A kopt_mcp import inside a function needs `# lazy: <why>` on its line or the line above
    (start-up time, an optional dependency, a module that must not load in the benchmark process)."""
    missing = []
    for name, path in sorted(MODULES.items()):
        if name in STANDALONE:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for _, top, line in _imports(path):
            if top:
                continue
            near = " ".join(lines[max(0, line - 2):line])
            if "# lazy:" not in near:
                missing.append(f"{path.relative_to(PKG.parent)}:{line}")
    assert missing == []


def duplicate_fields(source: str) -> list[str]:
    """`Class.name` for every name a class body annotates more than once (the later one silently wins:
    a merge that adds a field twice drops the first one's type and description)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            names = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)]
            found += sorted(f"{node.name}.{n}" for n in set(names) if names.count(n) > 1)
    return found


def test_no_class_declares_a_field_twice():
    dups = {str(p.relative_to(PKG.parent)): d for p in sorted(PKG.rglob("*.py"))
            if (d := duplicate_fields(p.read_text(encoding="utf-8")))}
    assert dups == {}


def test_the_duplicate_field_finder_finds_a_planted_one():
    assert duplicate_fields("class R:\n    code: str\n    reason: str\n    code: int | None = None\n") == ["R.code"]
