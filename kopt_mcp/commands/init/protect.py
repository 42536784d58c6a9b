"""The `[protect] paths` that `kopt-mcp init` proposes: the benchmark's and the tests' whole folders
where that is safe, else their files.

A harness is more than the files a command names. FlagGems' `benchmark/test_norm_perf.py` times with
`benchmark/performance_utils.py` and is configured by `benchmark/conftest.py`; its tests compare with
`tests/accuracy_utils.py`. On the H100 (2026-11-24) init protected only the named test files, so a
candidate could have edited the timer or the tolerance (an edited harness). The hand-finished configs
protect folders (`benchmark/`, `tests/`, `benchmark/scripts/`). So:

- a benchmark file protects its folder; a test file protects its top-level folder (tests share helpers
  across subfolders: Liger-Kernel's `test/utils.py`), else its own folder;
- a folder is protected only if it is not the repository root, defines no GPU kernel outside its
  pytest files (it would hold the code under optimization; tests often define kernels of their own)
  and holds no file the benchmark writes (a run that writes a protected file is rejected); otherwise
  the file itself is;
- oracle/reference files are protected as files, and so is every file that configures the test
  runner or a pytest harness (`runner_configs`): a `conftest.py` at the root or in a folder above a
  benchmark or test file, `pytest.ini`, and `pyproject.toml` / `setup.cfg` / `tox.ini` where they hold
  pytest's section. An agent on a pytest-benchmark harness (issue 35) found `pyproject.toml`, whose
  `[tool.pytest.ini_options]` steers both the benchmark and the tests, open to edits.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from kopt_mcp.bench.kernel_sources import defined_kernels

#: pytest configuration at the repository root: it changes what both the benchmark and the tests do
ROOT_CONFIG = ("conftest.py", "pytest.ini", ".pytest.ini")
#: files that configure pytest only where they hold its section (the section header as written)
SECTION_CONFIG = {"pyproject.toml": ("[tool.pytest.ini_options]", "[tool.pytest]"), "setup.cfg": ("[tool:pytest]",),
                  "tox.ini": ("[pytest]",)}


def runner_configs(repo: Path, files: list[str]) -> list[str]:
    """The files of `repo` that configure the test runner for `files` (the benchmark's and the tests'
    files, repository-relative): ROOT_CONFIG files at the root, SECTION_CONFIG files at the root that
    hold pytest's section, and every `conftest.py` in a folder from the root down to each file's own."""
    out = {name for name in ROOT_CONFIG if (repo / name).is_file()}
    for name, headers in SECTION_CONFIG.items():
        try:
            text = (repo / name).read_text(errors="replace")
        except OSError:
            continue
        if any(line.strip().startswith(headers) for line in text.splitlines()):
            out.add(name)
    for f in files:
        for folder in PurePosixPath(f).parents:
            if str(folder) != "." and (repo / folder / "conftest.py").is_file():
                out.add(f"{folder}/conftest.py")
    return sorted(out)


def _folder_is_safe(repo: Path, folder: str, written: set[str], cache: dict[str, bool]) -> bool:
    if folder not in cache:
        inside = any(PurePosixPath(w).is_relative_to(folder) for w in written)
        cache[folder] = not inside and not defined_kernels(repo / folder, skip_tests=True)
    return cache[folder]


def _collapse(paths: set[str]) -> list[str]:
    """Sorted, without paths that a protected folder ("a/") already covers."""
    folders = [p.rstrip("/") for p in paths if p.endswith("/")]
    keep = [p for p in paths
            if not any(p != f + "/" and PurePosixPath(p.rstrip("/")).is_relative_to(f) for f in folders)]
    return sorted(keep)


def protected_paths(repo: Path, bench: list[str], tests: list[str], oracles: list[str],
                    written: set[str] = frozenset()) -> list[str]:
    """The paths to propose for `[protect] paths`: folders end in "/", files are repository-relative.

    `bench`: the files the benchmark command names; `tests`: the repository's test files; `oracles`:
    reference implementations; `written`: files the benchmark's runs wrote. Reads the repository's
    sources (`defined_kernels`) to keep folders that hold kernels editable."""
    cache: dict[str, bool] = {}
    out: set[str] = set()

    def add(path: str, folders: list[str]) -> None:
        for f in folders:
            if f not in ("", ".") and _folder_is_safe(repo, f, written, cache):
                out.add(f + "/")
                return
        out.add(path)

    for b in bench:
        add(b, [str(PurePosixPath(b).parent)])
    for t in tests:
        parts = PurePosixPath(t).parts
        add(t, [parts[0] if len(parts) > 1 else "", str(PurePosixPath(t).parent)])
    out |= set(oracles)
    out |= set(runner_configs(repo, [*bench, *tests]))
    return _collapse(out)
