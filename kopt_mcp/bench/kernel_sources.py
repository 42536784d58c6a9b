"""The GPU kernels a repository's own sources define, and which of a trace's kernels they are:
`kopt-mcp init` proposes them as `[profiler] kernel` (kopt_mcp/commands/init/profiled.py) and, where
that is left empty, the baseline and kernel_trace_analysis name them beside the hottest kernel
(`GpuTarget.own`, `TraceResult.own_kernels`).

A benchmark's hottest kernel is often not the project's. On an H100 (2026-11-24) init proposed
`at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, ...>` for
ai-compiler-study/triton-kernels: `triton.testing.do_bench` zeroes a 256 MB buffer before every
timed call to clear L2, and that fill outran the project's RMSNorm kernels. On an H200 (2026-12-04)
Liger-Kernel's FusedLinearCrossEntropy benchmark spent 27.0% of its GPU time in torch's elementwise
add and 1.7% in Liger's two Triton kernels. The kernels a repository defines are its `@triton.jit` /
`@jit` / `@*.kernel` Python functions and its CUDA/HIP `__global__` functions; a trace's kernel is
the repository's where its function name (evidence/names.py `function_name`) is one of them.
Pure except `defined_kernels`, which reads the repository's files.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from kopt_mcp.evidence.names import function_name, is_utility_kernel, short_kernel_name
from kopt_mcp.evidence.trace import KernelStat

#: a pytest file: test_*.py or *_test.py
TEST_FILE = re.compile(r"^(test_.*|.*_test)\.py$")
#: tool, cache and environment folders never read as the repository's own code or tests
TOOL_DIRS = {".git", ".kopt", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".mypy_cache", ".pytest_cache"}
#: folders never scanned for kernel definitions: TOOL_DIRS, plus vendored code and build output
SKIP_DIRS = TOOL_DIRS | {"build", "dist", "site-packages", "third_party", "3rdparty"}
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


def own_kernels(kernels: list[KernelStat], defined: set[str]) -> list[KernelStat]:
    """The trace's `kernels` (hottest first, as a trace lists them) whose function the repository
    defines (`defined`: `defined_kernels`), in that order, at most MAX_TARGETS. Pure."""
    return [k for k in kernels if function_name(k.name) in defined][:MAX_TARGETS]


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
