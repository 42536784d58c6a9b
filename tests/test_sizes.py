"""Issue 37 item 3: no function over 80 lines and no module over 400 in kopt_mcp/. The ones over today
are listed with their size: the list may only shrink (a listed one that grew, or a new one over the
limit, fails), and a listed one back under the limit must leave the list (so it cannot grow back)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kopt_mcp"
MAX_FUNCTION, MAX_MODULE = 80, 400

#: over the limit on 2026-12-02, lines; cut them along the domain (issue 37 item 3), then drop the line here
FUNCTIONS: dict[str, int] = {}
MODULES: dict[str, int] = {}


def sizes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """(function "path:name" -> lines, module path -> lines) over the limits, paths relative to `root`."""
    functions, modules = {}, {}
    for path in sorted(root.rglob("*.py")):
        rel, text = path.relative_to(root).as_posix(), path.read_text()
        if len(text.splitlines()) > MAX_MODULE:
            modules[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION:
                    functions[f"{rel}:{node.name}"] = n
    return functions, modules


def over(found: dict[str, int], allowed: dict[str, int]) -> list[str]:
    """What breaks the ratchet: new entries, or listed ones that grew."""
    return [f"{k}: {n} lines" + (f" (listed at {allowed[k]})" if k in allowed else " (new)")
            for k, n in found.items() if n > allowed.get(k, 0)]


def test_no_function_or_module_grows_past_the_limits():
    functions, modules = sizes(PACKAGE)
    assert over(functions, FUNCTIONS) == [], f"functions over {MAX_FUNCTION} lines"
    assert over(modules, MODULES) == [], f"modules over {MAX_MODULE} lines"


def test_a_listed_one_back_under_the_limit_leaves_the_list():
    functions, modules = sizes(PACKAGE)
    assert sorted(set(FUNCTIONS) - set(functions)) == []
    assert sorted(set(MODULES) - set(modules)) == []


def test_the_size_check_finds_a_planted_long_function_and_module(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION))
    (tmp_path / "long.py").write_text(f"def f():\n{body}\n" + "\n" * (MAX_MODULE - MAX_FUNCTION))
    functions, modules = sizes(tmp_path)
    assert functions == {"long.py:f": MAX_FUNCTION + 1} and modules == {"long.py": MAX_MODULE + 1}
    assert over(functions, {}) == ["long.py:f: 81 lines (new)"]
