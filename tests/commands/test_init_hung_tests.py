"""Init's run of the tests: a test function one of whose cases pytest-timeout ended has its later
cases skipped by init's plugin and dropped with it as too slow (kopt_mcp/commands/init/
pytest_xfail_plugin.py). On one H200 (2026-12-03) Liger-Kernel's 4 `test_correctness_mixtralexperts`
cases each hung until the per-test limit: at init's 60 s limit, 240 s of the run for one finding.

Real pytest runs (pytest-timeout's signal method) in a planted repository; the hung case sleeps 120 s
against a 3 s limit, so CPU load cannot change which cases run."""

from __future__ import annotations

import re
import subprocess
import sys

from kopt_mcp.commands.init.correctness import check_correctness
from kopt_mcp.commands.init.pytest_run import HUNG_SKIP, PLUGIN_SOURCE

TESTS = (
    "import pathlib, time\nimport pytest\n\n"
    "def test_small():\n    pass\n\n"
    "@pytest.mark.parametrize('n', [1, 2, 3, 4])\ndef test_hangs(n):\n"
    "    pathlib.Path(f'ran-{n}').touch()\n    time.sleep(120)\n\n"
    "@pytest.mark.parametrize('n', [1, 2])\ndef test_fails_once(n):\n    assert n != 1\n")


def test_the_later_cases_of_a_hung_function_never_run_and_are_dropped_with_it(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_k.py").write_text(TESTS)
    checked = check_correctness(tmp_path, "", sys.executable, ["tests/test_k.py"], [], timeout_s=300, test_timeout_s=3)
    assert sorted(p.name for p in tmp_path.glob("ran-*")) == ["ran-1"]  # cases 2-4 were skipped, not run
    assert [(d.target, d.kind) for d in checked.drops] == [
        ("tests/test_k.py::test_hangs", "too slow"), ("tests/test_k.py::test_fails_once[1]", "failure")]
    assert checked.runs == 1 and checked.summary == "2 passed"  # test_small, test_fails_once[2]: a plain failure skips nothing
    assert checked.command.endswith(
        "--deselect tests/test_k.py::test_hangs --deselect 'tests/test_k.py::test_fails_once[1]'")
    assert checked.seconds < 30  # one case at the 3 s limit, not four
    assert subprocess.run(checked.command, shell=True, cwd=tmp_path, capture_output=True).returncode == 0


def test_the_plugin_spells_the_skip_reason_as_init_reads_it():
    found = re.search(r'^HUNG_SKIP = "([^"]+)"', PLUGIN_SOURCE.read_text(), re.M)
    assert found is not None and found.group(1) == HUNG_SKIP
