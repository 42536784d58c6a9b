"""Which test files and which pytest selection `kopt-mcp init` proposes for the benchmark's kernel
(kopt_mcp/commands/init/correctness.py runs them): the test files of the benchmark's topic
(`correctness_tests`) and pytest's own selection for it (`selection`: the benchmark's `-m` marker where
the tests carry it, as FlagGems' `-m rms_norm`; else `-k TOPIC` where no file is named after the
topic). Pure: names and sources in, names out.
"""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path

#: a performance suite, not a correctness test: FlagGems' benchmark/test_norm_perf.py is a pytest file
PERF_FILE = re.compile(r"(_perf|_bench|_benchmark)\.py$|^(bench|benchmark)_")
#: what a benchmark file's stem says around its topic ("test_norm_perf" -> "norm", "benchmark_rms_norm" -> "rms_norm")
_TOPIC_NOISE = re.compile(r"^(test_|benchmark_|bench_)|(_perf|_bench|_benchmark|_test)$")

def topics(bench: list[str], kernel: str | None) -> list[str]:
    """The benchmark's topic words: `kernel` (init's --kernel), else the benchmark files' stems
    without benchmark words ("benchmark/test_norm_perf.py" -> "norm"). Pure."""
    if kernel:
        return [kernel.lower()]
    return [w for w in (_TOPIC_NOISE.sub("", Path(b).stem.lower()) for b in bench if b.endswith(".py")) if len(w) >= 3]


def _test_topic(path: str) -> str:
    """A test file's topic: its stem without test words ("test/ops/test_gla.py" -> "gla")."""
    return re.sub(r"^test_|_test$", "", Path(path).stem.lower())


def correctness_tests(test_files: list[str], bench: list[str], kernel: str | None = None, command: str = "",
                      sources: dict[str, str] | None = None) -> list[str]:
    """The pytest files to propose as the correctness command, from the repository's test files
    (sorted) and the files the benchmark command names: those that are not performance suites
    (under a bench*/ folder, named *_perf.py, bench_*.py, ...) nor benchmark files; narrowed to

    1. with `kernel` (init's --kernel): those whose name holds it;
    2. those whose topic is a whole word of the benchmark's names or arguments (`benchmark_rms_norm.py`
       -> test_rms_norm.py, not test_fused_add_rms_norm.py; `--op chunk_gla` -> test_gla.py);
    3. those whose source (`sources`: file -> text) imports a module named after a topic word
       (`from pkg.ops.swiglu import ...` for the topic `swiglu`);
    4. those whose name holds a topic word of the benchmark files (`test_norm_perf.py` -> test_norm_ops.py);

    the first that finds any; else every test file. Pure."""
    tests = [t for t in test_files if t not in bench and not PERF_FILE.search(Path(t).name)
             and not any(part.lower().startswith("bench") for part in Path(t).parts[:-1])]
    words = topics(bench, kernel)
    if not kernel:
        spoken = " " + " ".join(re.split(r"[^a-z0-9]+", " ".join([*(Path(b).stem for b in bench), command]).lower())) + " "
        named = [t for t in tests if len(_test_topic(t)) >= 3
                 and " " + " ".join(re.split(r"[^a-z0-9]+", _test_topic(t))) + " " in spoken]
        if named:
            return named
    importing = [t for t in tests if words and set(words) & _imported_modules((sources or {}).get(t, ""))]
    if importing:
        return importing
    narrowed = [t for t in tests if any(w in Path(t).stem.lower() for w in words)]
    return narrowed or tests


_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+([\w, ()]+)|import\s+([\w., ]+))", re.M)


def _imported_modules(source: str) -> set[str]:
    """Every dotted piece of the modules a source imports, lower-case (`from a.ops.swiglu import f`
    -> {"a", "ops", "swiglu", "f"}). Pure."""
    out: set[str] = set()
    for frm, names, plain in _IMPORT.findall(source):
        for dotted in [frm, *re.split(r"[,\s()]+", names), *re.split(r"[,\s]+", plain)]:
            out |= {p.lower() for p in dotted.split(".") if p}
    return out


def _pytest_marker(command: str) -> str | None:
    """The `-m EXPR` a pytest command passes (`python -m pytest ... -m rms_norm` -> "rms_norm")."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    start = next((i for i, w in enumerate(words) if Path(w).name == "pytest"), None)
    if start is None:
        return None
    rest = words[start + 1:]
    return next((rest[i + 1] for i, w in enumerate(rest[:-1]) if w == "-m"), None)


def _test_names(source: str) -> list[str]:
    """Names of the test functions and classes of a pytest file's source ([] where it does not parse)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    return [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and n.name.lower().startswith("test")]


def selection(repo: Path, files: list[str], bench: list[str], bench_command: str, kernel: str | None) -> list[str]:
    """pytest's own selection of the benchmark's topic among `files`: `-m EXPR` where the benchmark
    is a pytest command with a marker expression whose markers the files use (`mark.NAME`); else
    `-k TOPIC` where no file is named after the topic and some, not all, test functions or classes
    are; else none."""
    texts = []
    for f in files:
        try:
            texts.append((repo / f).read_text(errors="replace"))
        except OSError:
            texts.append("")
    marker = _pytest_marker(bench_command)
    if marker:
        names = [n for n in re.findall(r"[A-Za-z_]\w*", marker) if n not in ("and", "or", "not")]
        if names and all(any(f"mark.{n}" in t for t in texts) for n in names):
            return ["-m", marker]
    words = topics(bench, kernel)
    if words and not any(w in Path(f).stem.lower() for f in files for w in words):
        tests = [n.lower() for t in texts for n in _test_names(t)]
        hit = next((w for w in words if any(w in n for n in tests) and not all(w in n for n in tests)), None)
        if hit:
            return ["-k", hit]
    return []
