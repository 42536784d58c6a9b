"""rules/shadowing.py: which new files shadow a module of the benchmark's interpreter (pure)."""

from __future__ import annotations

import sys

import pytest

from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.protect import FileChange
from kopt_mcp.rules.shadowing import ModuleNames, module_of, own_modules, shadowing_decision, shadowing_files

NAMES = ModuleNames(stdlib=frozenset(sys.stdlib_module_names), installed=frozenset({"numpy", "torch", "liger_kernel"}))


def added(*paths: str) -> list[FileChange]:
    return [FileChange("added", p) for p in paths]


@pytest.mark.parametrize("path, packages, module", [
    ("csv.py", set(), "csv"),
    ("numpy/__init__.py", set(), "numpy"),
    ("src/numpy/__init__.py", set(), "numpy"),
    ("json.cpython-311-x86_64-linux-gnu.so", set(), "json"),
    ("bench/csv.pyc", set(), "csv"),
    ("src/liger_kernel/csv.py", {"src/liger_kernel"}, None),  # liger_kernel.csv
    ("src/liger_kernel/__init__.py", {"src/liger_kernel"}, "liger_kernel"),
    ("README.md", set(), None),
    ("my-tool.py", set(), None),  # not an identifier: never imported
])
def test_module_of(path, packages, module):
    assert module_of(path, packages) == module


def test_a_package_folder_that_is_a_sys_path_root_exposes_its_modules():
    # `python src/pkg/run.py` puts src/pkg first on sys.path: src/pkg/csv.py is `csv` there
    assert module_of("src/pkg/csv.py", {"src/pkg"}, roots={"src/pkg"}) == "csv"


def test_new_top_level_modules_that_shadow_stdlib_or_installed_names_are_named():
    hits = shadowing_files(added("csv.py", "torch/__init__.py", "fast_helpers.py", "pkg/json.py"), NAMES,
                           packages={"pkg"})
    assert [(h.path, h.module) for h in hits] == [("csv.py", "csv"), ("torch/__init__.py", "torch")]
    d = shadowing_decision(hits)
    assert d.outcome == "rejected" and d.code == Code.SHADOWING and d.numbers["files"] == 2
    assert "csv.py" in d.reason and "torch/__init__.py" in d.reason


def test_only_added_files_shadow_and_the_repositorys_own_modules_never_do():
    changes = [FileChange("rewrote", "csv.py"), FileChange("deleted", "json.py"),
               *added("src/liger_kernel/__init__.py")]
    own = own_modules(["csv.py", "src/liger_kernel/__init__.py", "src/liger_kernel/ops.py"], {"src/liger_kernel"})
    assert own == {"csv", "liger_kernel"}
    assert shadowing_files(changes, NAMES, {"src/liger_kernel"}, own=own) == []
    assert shadowing_decision([]) is None


@pytest.mark.parametrize("change", [
    FileChange("added", "sitecustomize.py"), FileChange("rewrote", "a/b/usercustomize.py"),
    FileChange("added", "deep/x/extra.pth"), FileChange("rewrote", "y.pth")])
def test_start_up_hooks_anywhere_added_or_rewritten(change):
    hits = shadowing_files([change], ModuleNames(frozenset(), frozenset()), packages={"a/b", "deep/x"})
    assert [h.path for h in hits] == [change.path]


def test_a_deleted_start_up_hook_runs_nothing():
    assert shadowing_files([FileChange("deleted", "sitecustomize.py")], NAMES, set()) == []
