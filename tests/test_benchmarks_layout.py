"""benchmarks/ is shaped like what it holds (issue 37 item 4): no import circles among its modules, one
folder per question (no loose scripts at its root), and every recorded result claimed by exactly one
question of benchmarks/README.md's index.

Static: the modules are parsed (ast), never imported. An import counts wherever it sits (a function's
lazy import closes a circle as surely as a top-level one), in both spellings the benchmarks use:
`import benchmarks.x.y` / `from benchmarks.x import y` (package style) and `from projects import ...`
(sys.path style, a sibling of the importing file)."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

from tests.import_cycles import cycles

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _modules() -> dict[str, Path]:
    """dotted name (benchmarks.x.y) -> file, for every .py under benchmarks/ outside results/."""
    out = {}
    for path in BENCH.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if "results" in rel.parts:
            continue
        parts = list(rel.with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The benchmarks modules `path` (module `name`) imports, by either spelling."""
    package = name.rsplit(".", 1)[0] if path.name != "__init__.py" else name
    found: set[str] = set()

    def resolve(dotted: str) -> None:
        for candidate in (dotted, f"{package}.{dotted}"):  # package style, then a sibling (sys.path style)
            if candidate in modules and candidate != name:
                found.add(candidate)
                return

    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                resolve(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            for alias in node.names:  # `from benchmarks.slots_gpu import many` names a module
                resolve(f"{stem}.{alias.name}")
            resolve(stem)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the benchmarks modules it imports."""
    modules = _modules()
    return {name: _targets(name, path, modules) for name, path in modules.items()}


def test_cycle_finder_sees_both_spellings():
    """The finder itself: a planted sys.path-style circle and a package-style one are both found."""
    graph = {"a.x": {"a.y"}, "a.y": {"a.x"}, "a.z": {"a.x"}, "b.p": {"b.q"}, "b.q": {"b.r"}, "b.r": {"b.p"}}
    assert sorted(cycles(graph)) == [["a.x", "a.y"], ["b.p", "b.q", "b.r"]]


def test_graph_reads_sibling_and_package_imports():
    """The real graph holds edges of both spellings (so an empty cycle list is not an empty graph)."""
    graph = import_graph()
    assert "benchmarks.real_repos.model" in graph["benchmarks.real_repos.fla"]  # `from model import ...`
    assert "benchmarks.real_repos.fla" in graph["benchmarks.real_repos.projects"]
    assert "benchmarks.common" in graph["benchmarks.slots_gpu.host_control"]  # `from benchmarks.common import`
    assert "benchmarks.slots_gpu.host_control" in graph["benchmarks.slots_gpu.many"]  # lazy, in a function


def test_no_import_cycles_in_benchmarks():
    assert cycles(import_graph()) == []


def test_one_folder_per_question():
    """benchmarks/' root holds folders (one per question), its README index and the one module of shared
    helpers (common.py), no loose scripts."""
    loose = sorted(p.name for p in BENCH.iterdir() if p.is_file() and p.name not in ("README.md", "common.py"))
    assert loose == []


def _index() -> list[tuple[str, list[str], list[str]]]:
    """benchmarks/README.md's index: (question, paths named in its folder/script/device cells, result globs)."""
    text = (BENCH / "README.md").read_text().split("## Index", 1)[1]
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("question", "---"):
            continue
        paths = [tok.split()[0] for cell in cells[1:4] for tok in re.findall(r"`([^`]+)`", cell) if "/" in tok.split()[0]]
        rows.append((cells[0], paths, re.findall(r"`([^`]+)`", cells[4])))
    return rows


def claims(entries: list[str], index: list[tuple[str, list[str], list[str]]]) -> dict[str, list[str]]:
    """entry of benchmarks/results/ -> the questions whose globs match it."""
    return {e: [q for q, _, globs in index if any(fnmatch.fnmatchcase(e, g) for g in globs)] for e in entries}


def test_claims_catch_unclaimed_and_doubly_claimed():
    """The claim check itself: an entry no glob matches and one two questions match are both seen."""
    index = [("a", [], ["*-chaos*"]), ("b", [], ["*-cpu-*"])]
    got = claims(["2026-11-23-cpu-chaos.md", "2026-11-23-h100-x.md", "2026-11-23-cpu-y.md"], index)
    assert got == {"2026-11-23-cpu-chaos.md": ["a", "b"], "2026-11-23-h100-x.md": [], "2026-11-23-cpu-y.md": ["b"]}


def test_every_result_claimed_by_exactly_one_question():
    index = _index()
    assert len(index) >= 20
    entries = sorted(p.name for p in (BENCH / "results").iterdir() if p.name != "README.md")
    bad = {e: qs for e, qs in claims(entries, index).items() if len(qs) != 1}
    assert bad == {}


def test_index_names_existing_paths_and_every_question_folder():
    index = _index()
    missing = sorted({p for _, paths, _ in index for p in paths if not (ROOT / p).exists()})
    assert missing == []
    named = {p.rstrip("/") for _, paths, _ in index for p in paths}
    folders = sorted(f"benchmarks/{d.name}" for d in BENCH.iterdir()
                     if d.is_dir() and d.name not in ("results", "__pycache__"))
    assert [f for f in folders if f not in named] == []
