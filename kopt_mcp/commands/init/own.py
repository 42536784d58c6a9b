"""Which provider and which kernel of a result table are the repository's own, for `kopt-mcp init`.

Result tables carry several providers: Liger-Kernel's long CSV a `kernel_provider` column (`liger`,
`huggingface`), a `triton.testing.perf_report` table one column per provider (`triton (GB/s)`,
`torch (GB/s)`), FlagGems' printed table `Torch Latency (ms)` and `Gems Latency (ms)`. On the H100
(issue 25) init counted Liger's `huggingface` rows: the torch reference, which no edit of the
repository's kernel can move. A provider is the repository's own when

1. its branch in the benchmark's source calls the repository's code: `if provider == "liger":
   layer = LigerRMSNorm(...)` with `LigerRMSNorm` imported from the repository's `liger_kernel`
   (`branch_calls`: `if`/`elif` tests comparing with a string, and dict literals keyed by strings);
2. its name matches the repository's package or project name (`liger` in `liger_kernel`, `gems` in
   `flag_gems`, `triton` in `triton_kernels`);
3. it is named as such (`ours`, `own`, `custom`);

and a known reference (`torch`, `huggingface`, `torch_compile`, `numpy`, ...) is never chosen while
another value is there. A kernel column with several kernels counts the one the benchmark command
names (`benchmark_rms_norm.py` -> `rms_norm`). `ownership` reads the repository (I/O); `choose`,
`provider_label` and `is_reference` are pure.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from pydantic import BaseModel

#: provider names of reference implementations a kernel project compares itself against
REFERENCE_NAMES = frozenset({
    "torch", "pytorch", "torch_compile", "compile", "compiled", "inductor", "eager", "huggingface", "hf",
    "transformers", "reference", "ref", "naive", "native", "baseline", "base", "numpy", "np", "scipy", "jax",
    "cublas", "cudnn", "cublaslt", "aten", "apex", "sdpa", "vanilla", "golden", "oracle", "library", "default"})
#: provider names that say "this repository's implementation"
OWN_WORDS = ("ours", "own", "custom", "this", "new", "optimized")
#: name pieces too common to tie a provider to a repository ("kernel" in liger_kernel)
GENERIC_TOKENS = frozenset({"kernel", "kernels", "ops", "op", "lib", "libs", "py", "python", "src", "repo",
                            "the", "and", "for", "cuda", "gpu", "main", "master", "core", "utils", "tools"})
#: folders that hold no package of the repository's own code
NOT_CODE = frozenset({"test", "tests", "testing", "bench", "benchmark", "benchmarks", "docs", "doc", "examples",
                      "example", "scripts", "tools", "build", "dist", "third_party", "3rdparty"})
#: words of a wide table's column name that are the measurement, not the provider ("Gems Latency (ms)")
_MEASURE_WORDS = re.compile(r"\b(latency|time|runtime|duration|speed|throughput|bandwidth|median|mean|tflops|"
                            r"gflops|gbps|ms|us|ns|s)\b", re.I)


class Ownership(BaseModel):
    """What ties a result value to the repository: its names and the benchmark's source.

    `names`: package, module and project names ("liger_kernel", "Liger-Kernel"); `branches`: a
    provider value -> the repository's names its branch in the benchmark's source calls;
    `command`: the benchmark command and the stems of the files it names ("benchmark_rms_norm")."""

    names: list[str] = []
    branches: dict[str, list[str]] = {}
    command: str = ""


class Choice(BaseModel):
    """The value that counts, why (one line for the proposal), and the others (comparison rows)."""

    value: str
    why: str
    others: list[str]


def _tokens(text: str) -> set[str]:
    return {t for t in re.split(r"[^a-z0-9]+", text.lower()) if len(t) >= 3 and t not in GENERIC_TOKENS}


def provider_label(column: str) -> str:
    """The provider a wide table's metric column names: the column without its unit in parentheses
    and measurement words ("Gems Latency (ms)" -> "Gems", "triton (GB/s)" -> "triton"). Pure."""
    text = re.sub(r"\([^)]*\)", " ", column)
    text = _MEASURE_WORDS.sub(" ", text)
    return " ".join(text.split()) or column


def is_reference(value: str) -> bool:
    """True when `value` names a reference implementation (REFERENCE_NAMES: torch, huggingface,
    torch_compile, numpy, ...), alone or in all its pieces. Pure."""
    low = provider_label(value).lower().strip()
    pieces = [p for p in re.split(r"[^a-z0-9]+", low) if p]
    return low in REFERENCE_NAMES or bool(pieces) and all(p in REFERENCE_NAMES for p in pieces)


def _packages(repo: Path) -> list[str]:
    """Import names of the repository's own code: packages (folders with __init__.py) at the root or
    under src/, and top-level modules that are not tests, setup, references or oracles."""
    out: list[str] = []
    for root in (repo, repo / "src"):
        if not root.is_dir():
            continue
        for p in sorted(root.iterdir()):
            if p.name.startswith((".", "_")) or p.name.lower() in NOT_CODE:
                continue
            if p.is_dir() and (p / "__init__.py").is_file() and p.name.isidentifier():
                out.append(p.name)
            elif root == repo and p.suffix == ".py" and p.stem.isidentifier() and not re.match(
                    r"^(setup|conftest|noxfile|test_.*|.*_test|bench.*|(reference|ref|oracle|golden)(_.*)?|"
                    r".*_(reference|ref|oracle))$", p.stem):
                out.append(p.stem)
    return out


def _project_name(repo: Path) -> str | None:
    try:
        return tomllib.loads((repo / "pyproject.toml").read_text())["project"]["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def branch_calls(source: str, own: set[str]) -> dict[str, list[str]]:
    """Per string value, the names imported from the repository's modules (`own`: import names)
    that the code selected by that value uses: the body of `if x == "liger":` / `elif` (also
    `x in ("a", "b")`), and the value of a dict literal entry `{"ours": kernel.rms_norm}`. Source
    that does not parse gives {}. Pure."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    local: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in own:
            local |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            local |= {a.asname or a.name.split(".")[0] for a in node.names if a.name.split(".")[0] in own}

    def used(nodes: list[ast.AST]) -> list[str]:
        names = {n.id for body in nodes for n in ast.walk(body) if isinstance(n, ast.Name)}
        return sorted(names & local)

    out: dict[str, list[str]] = {}

    def add(values: list[str], names: list[str]) -> None:
        for v in values:
            if names:
                out[v] = sorted(set(out.get(v, [])) | set(names))

    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) and len(node.test.ops) == 1:
            op, right = node.test.ops[0], node.test.comparators[0]
            consts = [node.test.left, right] if isinstance(op, ast.Eq) else [right] if isinstance(op, ast.In) else []
            values = [e.value for c in consts for e in ([c] if isinstance(c, ast.Constant) else getattr(c, "elts", []))
                      if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            add(values, used(node.body))
        elif isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    add([k.value], used([v]))
    return out


def ownership(repo: Path, bench_files: list[str], command: str) -> Ownership:
    """The repository's names and, from the benchmark's Python files (`bench_files`, repository-
    relative), which provider values call the repository's code (`branch_calls`). Unreadable
    files are skipped."""
    own = _packages(repo)
    names = [*own, *(n for n in (_project_name(repo), repo.resolve().name) if n)]
    branches: dict[str, list[str]] = {}
    for f in bench_files:
        if f.endswith(".py"):
            try:
                found = branch_calls((repo / f).read_text(errors="replace"), set(own))
            except OSError:
                continue
            for v, used in found.items():
                branches[v] = sorted(set(branches.get(v, [])) | set(used))
    stems = " ".join(Path(f).stem for f in bench_files)
    return Ownership(names=list(dict.fromkeys(names)), branches=branches, command=f"{command} {stems}".strip())


def choose(values: list[str], own: Ownership, what: str = "provider", labels: dict[str, str] | None = None) -> Choice:
    """The value of `values` (a provider column's values, or a wide table's metric columns with
    their provider `labels`) that is the repository's own, with why. In order: a value whose branch
    calls the repository's code and whose name matches it; its branch alone; its name alone; an
    own-word (`ours`); for what="kernel", first the value the benchmark command names (the longest);
    else the first value that is not a reference. A provider that is a reference is left only when
    every value is one. Pure."""
    labels = labels or {}
    label = {v: labels.get(v, v) for v in values}
    pool = [v for v in values if what == "kernel" or not is_reference(label[v])] or list(values)
    repo_tokens = set().union(*(_tokens(n) for n in own.names)) if own.names else set()
    named = {v: sorted(_tokens(label[v]) & repo_tokens) for v in pool}
    calls = {v: own.branches.get(v) or own.branches.get(label[v]) or [] for v in pool}
    in_command = [v for v in pool if label[v].lower() in own.command.lower()]
    refs = [v for v in values if v not in pool]

    def why_of(v: str) -> str:
        parts = []
        if calls[v]:
            parts.append(f"its branch in the benchmark calls {', '.join(calls[v])} from this repository")
        if named[v]:
            which = [n for n in own.names if _tokens(n) & set(named[v])]
            parts.append(f"its name matches the repository's {', '.join(which[:3])}")
        return " and ".join(parts)

    rules = [
        (lambda v: calls[v] and named[v], why_of),
        (lambda v: calls[v], why_of),
        (lambda v: named[v], why_of),
        (lambda v: label[v].lower() in OWN_WORDS, lambda v: f"{label[v]!r} names this repository's implementation"),
    ]
    if what == "kernel":
        rules.insert(0, (lambda v: v in in_command, lambda v: "the benchmark command names it"))
    for test, why in rules:
        hits = sorted((v for v in pool if test(v)), key=lambda v: -len(v) if what == "kernel" else 0)
        if hits:
            pick = hits[0]
            break
    else:
        pick = pool[0]
        why = lambda v: (  # noqa: E731
            "the only value that is not a known reference" if len(pool) == 1 and refs else
            "nothing ties a value to this repository: check it is yours")
    others = [v for v in values if v != pick]
    text = why(pick)
    if refs and pick not in refs:
        text += f"; {', '.join(map(repr, refs))} {'is a reference' if len(refs) == 1 else 'are references'}"
    return Choice(value=pick, why=text, others=others)
