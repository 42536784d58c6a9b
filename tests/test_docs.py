"""The docs stay true to the tree: every file path README.md and docs/*.md name exists, the README
starts with the commands a newcomer runs and stays short, its rules table has one line per rule
(code and test included) matching docs/rules.md's sections, and the layer table of
docs/architecture.md holds for every import in the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_architecture import MODULES, _graph

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "kopt_mcp"
DOCS = [ROOT / "README.md", ROOT / "claude_config_examples" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: top-level folders a path in the docs may start with (resolved from the repository root)
ROOTS = ("kopt_mcp", "tests", "benchmarks", "scripts", "examples", "resources", "docs", "claude_config_examples")
#: a path-like token: folders, then a file with a known suffix or a trailing slash (a folder)
PATH = re.compile(r"(?<![\w./:-])((?:[\w.-]+/)+(?:[\w.-]+\.(?:py|md|sh|json|toml|png|log|txt)\b)?)")
RULE_ROW_MAX = 120
README_MAX_LINES = 220


def _prose(text: str) -> str:
    """The text without fenced toml/json blocks: those are examples of a user's kernel repository
    (its `bench/`, its `tests/`), not paths of this one."""
    return re.sub(r"^```(?:toml|json)\n.*?^```", "", text, flags=re.S | re.M)


def _subpackages() -> set[str]:
    return {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}


def _missing(path: str, here: Path = ROOT) -> bool:
    """True if `path` names this repository's file or folder and it is not there. A path starting
    with a kopt_mcp subpackage (`rules/noise.py`) is read inside kopt_mcp/, one starting with a
    folder beside the doc (`claude_code/.mcp.json`) from the doc's folder."""
    first = path.split("/", 1)[0]
    if first in ROOTS:
        return not (ROOT / path).exists()
    if first in _subpackages():
        return not (PKG / path).exists()
    if here != ROOT and (here / first).is_dir():
        return not (here / path).exists()
    return False  # a path of the user's repository or a runtime folder (`.kopt/worktrees/`)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_the_docs_name_exists(doc):
    found = PATH.findall(_prose(doc.read_text(encoding="utf-8")))
    assert found  # the pattern reads this doc at all
    assert sorted({p for p in found if _missing(p, doc.parent)}) == []


def test_the_path_check_catches_a_stale_path():
    assert _missing("kopt_mcp/executor.py") and _missing("rules/no_such_rule.py")
    assert _missing("tests/rules/test_no_such_rule.py") and _missing("benchmarks/results/no-such.md")
    assert not _missing("rules/noise.py") and not _missing("tests/test_architecture.py")
    text = "see `kopt_mcp/rules/gone.py` and\n```toml\n[protect]\npaths = [\"tests/ref.py\"]\n```\n"
    assert PATH.findall(_prose(text)) == ["kopt_mcp/rules/gone.py"]


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_starts_with_the_newcomer_commands_and_stays_short():
    text = _readme()
    assert len(text.splitlines()) <= README_MAX_LINES
    first = re.search(r"^```\w*\n(.*?)^```", text, flags=re.S | re.M)
    assert first and first.start() < text.index("\n## ")  # before the first section
    block = first.group(1)
    assert 'pip install -e ".[test]"' in block and "kopt-mcp demo" in block
    assert "python -m pytest -q" in block  # .ci/run runs this command


def _rules_table() -> list[list[str]]:
    text = _readme()
    section = text[text.index("## The loop and its rules"):]
    section = section[:section.index("\n## ")]
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| rule |")
    return [[c.strip() for c in r.strip("|").split("|")] for r in rows[1:] if not r.startswith("|---")]


def test_readme_rules_table_one_short_line_per_rule_with_code_and_test():
    rows = _rules_table()
    assert len(rows) >= 15
    text = _readme()
    for cells in rows:
        line = next(line for line in text.splitlines() if line.startswith(f"| {cells[0]} |"))
        assert len(line) <= RULE_ROW_MAX, line
        rule, _, code, test = cells
        assert (PKG / code).is_file(), (rule, code)
        assert test.startswith("tests/") and (ROOT / test).is_file(), (rule, test)


def test_every_rule_has_its_section_in_docs_rules():
    rules = [cells[0] for cells in _rules_table()]
    sections = re.findall(r"^## (.+)$", (ROOT / "docs" / "rules.md").read_text(encoding="utf-8"), flags=re.M)
    assert [s for s in sections if s != "Reason codes"] == rules


def _layers() -> dict[str, int]:
    """docs/architecture.md's layer table: module prefix -> layer number."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    out = {}
    for n, cell in re.findall(r"^\| (\d) \w+ \| (.+) \|$", text, flags=re.M):
        for path in re.findall(r"`([\w/.]+)`", cell):
            out["kopt_mcp." + path.removesuffix(".py").strip("/").replace("/", ".")] = int(n)
    return out


def _layer(module: str, layers: dict[str, int]) -> int | None:
    hits = [p for p in layers if module == p or module.startswith(p + ".")]
    return layers[max(hits, key=len)] if hits else None


def test_architecture_layer_table_places_every_module_and_no_import_goes_up():
    layers = _layers()
    assert len(set(layers.values())) >= 5
    unplaced = sorted(m for m in MODULES if m != "kopt_mcp" and _layer(m, layers) is None)
    assert unplaced == []
    upward = sorted(f"{a} ({_layer(a, layers)}) -> {b} ({_layer(b, layers)})"
                    for a, targets in _graph().items() for b in targets
                    if a != "kopt_mcp" and _layer(b, layers) > _layer(a, layers))
    assert upward == []
