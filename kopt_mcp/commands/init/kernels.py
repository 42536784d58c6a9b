"""The target kernels `kopt-mcp init` proposes: the kernels of one profiled run that the repository
itself defines, hottest first.

A benchmark's hottest kernel is often not the project's. On an H100 (2026-11-24) init proposed
`at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, ...>` for
ai-compiler-study/triton-kernels: `triton.testing.do_bench` zeroes a 256 MB buffer before every
timed call to clear L2, and that fill outran the project's RMSNorm kernels. The hand-finished config
names `_rms_norm_(fwd|bwd)`, the two `@triton.jit` functions of the repository that the benchmark
launches. So the proposal takes the trace's kernels whose function the repository defines (a
`@triton.jit` / `@jit` / `@*.kernel` Python function, or a CUDA/HIP `__global__` function); where
none is, the hottest kernel that is not input generation or a copy (`is_utility_kernel`); else the
hottest. Pure except `defined_kernels`, which reads the repository's files.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from kopt_mcp.commands.init.read import TEST_FILE
from kopt_mcp.commands.init.runs import SKIP_DIRS as _SKIP_TESTS
from kopt_mcp.evidence.names import function_name, is_utility_kernel, short_kernel_name

#: folders never scanned for kernel definitions: those init skips for tests, plus vendored code and build output
SKIP_DIRS = _SKIP_TESTS | {"build", "dist", "site-packages", "third_party", "3rdparty"}
#: C++ sources that may hold `__global__` functions
CUDA_SUFFIXES = {".cu", ".cuh", ".hip", ".cpp", ".cc", ".cxx", ".h", ".hpp"}
MAX_FILE_BYTES = 2 << 20
#: at most this many kernels in the proposed regex
MAX_TARGETS = 8

_GLOBAL = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?[\w:<>,\s\*&]*?\b(\w+)\s*\(")
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")


def python_kernels(source: str) -> set[str]:
    """Names of the functions in Python `source` decorated as GPU kernels: a decorator whose text
    holds "jit" (`@triton.jit`, `@triton.jit(do_not_specialize=...)`, `@jit`) or ends in "kernel"
    (`@cute.kernel`). Triton names its kernels after the function, so these are the names a trace
    shows. Source that does not parse gives none. Pure."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in node.decorator_list:
                text = ast.unparse(d.func if isinstance(d, ast.Call) else d)
                if "jit" in text or text.endswith("kernel"):
                    out.add(node.name)
                    break
    return out


def cuda_kernels(source: str) -> set[str]:
    """Names of the `__global__` functions in CUDA/HIP `source` (`__launch_bounds__(...)` and
    templates allowed). Pure."""
    return {m.group(1) for m in _GLOBAL.finditer(_LAUNCH_BOUNDS.sub(" ", source))}


def defined_kernels(repo: Path, skip_tests: bool = False) -> set[str]:
    """Every GPU kernel function name the repository's own sources define (`python_kernels` of its
    .py files, `cuda_kernels` of its C++/CUDA/HIP files), outside hidden, vendored and build folders;
    files over 2 MiB or unreadable are skipped, and pytest files (TEST_FILE) with `skip_tests`."""
    names: set[str] = set()
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        for f in files:
            path, suffix = Path(root) / f, Path(f).suffix
            if (suffix != ".py" and suffix not in CUDA_SUFFIXES) or (skip_tests and TEST_FILE.match(f)):
                continue
            try:
                if path.stat().st_size > MAX_FILE_BYTES:
                    continue
                text = path.read_text(errors="replace")
            except OSError:
                continue
            if suffix == ".py" and ("jit" in text or "kernel" in text):
                names |= python_kernels(text)
            elif suffix != ".py" and "__global__" in text:
                names |= cuda_kernels(text)
    return names


def choose_targets(names: list[str], defined: set[str], topic: str | None = None) -> tuple[list[str], str]:
    """The kernels to propose as `[profiler] kernel`, from a trace's kernel `names` (hottest first)
    and the repository's `defined` kernel functions, with why (one line, for the proposal's comment).

    1. The kernels whose function the repository defines, hottest first (at most MAX_TARGETS), narrowed
       to those whose name holds `topic` (init's --kernel) where any does.
    2. Else the hottest kernel that is not input generation or a copy; else the hottest.
    An empty trace gives ([], why). Pure."""
    if not names:
        return [], "the trace has no kernels"
    ours = [n for n in names if function_name(n) in defined]
    if topic:
        ours = [n for n in ours if topic.lower() in n.lower()] or ours
    hottest = short_kernel_name(names[0])
    if ours:
        why = f"{min(len(ours), MAX_TARGETS)} kernel(s) this repository defines, hottest first"
        if names[0] not in ours:
            why += f"; the hottest, {hottest}, is not defined here (a harness or library kernel)"
        return ours[:MAX_TARGETS], why
    useful = [n for n in names if not is_utility_kernel(n)]
    pick = (useful or names)[0]
    why = "hottest kernel"
    if pick != names[0]:
        why += f" that is not input generation or a copy (the hottest is {hottest})"
    return [pick], why + "; no kernel of the trace is defined in this repository's sources: check it is yours"
