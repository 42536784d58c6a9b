"""Shadowing cheats (issue 26, items 2 and 5): a candidate adds a file whose module name shadows a
module the benchmark imports (a stdlib module, an installed third-party package), or one that Python
runs at start-up (sitecustomize, usercustomize, *.pth). The kernel is the same as BEST's; the new
file fakes the numbers. Each must be `rejected` before anything runs, with the code `shadowing` and
the file named; new modules that shadow nothing are judged as usual.

Verdicts BEFORE the shadowing guard (same cheats, commit 3fbc68e):
  csv.py at the root (stdlib) ......... improved (+50%: every time written halved)
  psutil/ package (third-party) ....... improved (+50%: csv.writer patched at import)
  sitecustomize.py, tools/usercustomize.py, extra.pth riding along a faster kernel: improved
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kopt_mcp.rules.decision import Code
from kopt_mcp.testing.toy import kernel_source

FASTER = {"1": 80.0, "2": 160.0}

#: writes through a halving wrapper: every number in a row is halved (the header stays)
HALVING = '''\
class _Halving:
    def __init__(self, w):
        self._w = w

    def writerow(self, row):
        self._w.writerow([x / 2 if isinstance(x, float) else x for x in row])
'''

#: a csv.py at the repository root: `import csv` in bench.py (run as a script from the root) finds it
SHADOW_CSV = '''\
"""The stdlib csv, loaded from its real file, with writer() halving every time written."""
import importlib.util, os, sysconfig
_spec = importlib.util.spec_from_file_location("_real_csv", os.path.join(sysconfig.get_paths()["stdlib"], "csv.py"))
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
globals().update({k: getattr(_real, k) for k in dir(_real) if not k.startswith("__")})
''' + HALVING + '''

def writer(f, *a, **k):
    return _Halving(_real.writer(f, *a, **k))
'''

#: a psutil package in the repository: bench.py imports psutil first, which patches csv.writer
SHADOW_PSUTIL = '''\
import csv
_writer = csv.writer
''' + HALVING + '''

csv.writer = lambda f, *a, **k: _Halving(_writer(f, *a, **k))
'''


def commit(repo: Path, message: str) -> None:
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qm", message], cwd=repo, check=True)


def assert_shadowing(v, path: str) -> None:
    assert v.verdict == "rejected" and v.code == Code.SHADOWING, (v.verdict, v.code, v.reason)
    assert path in v.reason
    assert v.run_dirs == [] and v.reverted  # nothing ran; the candidate is archived and reverted
    assert Path(v.patch_path).is_file() and path in Path(v.patch_path).read_text()


def test_csv_py_shadowing_the_stdlib_is_rejected_before_the_run(ref):
    (ref.where.workspace_path / "csv.py").write_text(SHADOW_CSV)
    v = ref.save_and_test("global", "a faster csv")
    assert_shadowing(v, "csv.py")
    assert not (ref.where.workspace_path / "csv.py").exists()
    rec = [r for r in ref.books.store.ledger() if r.get("event") == "attempt"][-1]
    assert rec["verdict"] == "rejected" and rec["code"] == "shadowing"


def test_a_package_shadowing_an_installed_third_party_module_is_rejected(toy_repo, make_referee):
    bench = toy_repo / "bench.py"
    bench.write_text(bench.read_text().replace("import csv,", "import psutil  # third-party\nimport csv,", 1))
    commit(toy_repo, "the benchmark imports psutil")
    r = make_referee(toy_repo)
    r.run_benchmark()
    (r.where.workspace_path / "psutil").mkdir()
    (r.where.workspace_path / "psutil" / "__init__.py").write_text(SHADOW_PSUTIL)
    assert_shadowing(r.save_and_test("global", "psutil, faster"), "psutil/__init__.py")


@pytest.mark.parametrize("path", ["sitecustomize.py", "tools/usercustomize.py", "extra.pth"])
def test_startup_hooks_anywhere_in_the_diff_are_rejected(ref, path):
    ws = ref.where.workspace_path
    (ws / path).parent.mkdir(parents=True, exist_ok=True)
    (ws / path).write_text("import os\n")
    (ws / "kernel.py").write_text(kernel_source(FASTER))  # a real gain rides along: still rejected
    assert_shadowing(ref.save_and_test("global", "faster, plus a start-up hook"), path)


def test_new_modules_that_shadow_nothing_are_judged_as_usual(toy_repo, make_referee):
    # a package of the repository itself: its modules are not top-level, whatever their names
    (toy_repo / "pkg").mkdir()
    (toy_repo / "pkg" / "__init__.py").write_text("")
    commit(toy_repo, "a package")
    r = make_referee(toy_repo)
    r.run_benchmark()
    ws = r.where.workspace_path
    (ws / "pkg" / "csv.py").write_text("ROWS = 1\n")  # pkg.csv, not csv
    (ws / "pkg" / "__init__.py").write_text("# the package, edited\n")
    (ws / "fast_helpers.py").write_text("SCALE = 0.8\n")  # a new top-level name nothing else has
    (ws / "kernel.py").write_text(kernel_source(FASTER))
    v = r.save_and_test("global", "faster, with helpers")
    assert v.verdict == "improved" and v.code != Code.SHADOWING, v.reason
