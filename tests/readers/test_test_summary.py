"""The [correctness] command's counts (readers/test_summary.py): pytest summary lines as pytest 9 wrote
them (copied from real runs: -q and default verbosity, deselection, collection errors, a long run's
clock suffix, colour codes), a JUnit report, and a live pytest run read end to end."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kopt_mcp.readers.test_summary import correctness_run, junit_counts, junit_path, pytest_counts


def _c(line: str) -> tuple[int, int, int, int, int, int, int] | None:
    t = pytest_counts(line)
    return None if t is None else (t.passed, t.failed, t.skipped, t.errors, t.xfailed, t.xpassed, t.deselected)


@pytest.mark.parametrize("line, counts", [
    ("= 1 failed, 2 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 warning, 1 error in 4.34s =", (2, 1, 1, 1, 1, 1, 0)),
    ("1 failed, 2 passed, 1 skipped, 1 xfailed, 1 xpassed, 1 warning, 1 error in 5.09s", (2, 1, 1, 1, 1, 1, 0)),
    ("17 passed in 0.42s", (17, 0, 0, 0, 0, 0, 0)),
    ("1 passed, 6 deselected in 5.98s", (1, 0, 0, 0, 0, 0, 6)),
    ("============================ 7 deselected in 5.60s =============================", (0, 0, 0, 0, 0, 0, 7)),
    ("6 passed in 75.43s (0:01:15)", (6, 0, 0, 0, 0, 0, 0)),
    ("1 error in 5.49s", (0, 0, 0, 1, 0, 0, 0)),
    ("3 passed, 2 errors in 0.20s", (3, 0, 0, 2, 0, 0, 0)),
    ("no tests ran in 0.01s", (0, 0, 0, 0, 0, 0, 0)),
    ("\x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m16 passed\x1b[0m\x1b[31m in 0.51s\x1b[0m", (16, 1, 0, 0, 0, 0, 0)),
])
def test_pytest_summary_lines(line, counts):
    assert _c(line) == counts


@pytest.mark.parametrize("text", ["17 passed", "ok 3 passed in 2s", "Ran 4 tests in 0.001s\n\nOK", ""])
def test_other_output_has_no_counts(text):
    assert pytest_counts(text) is None


def test_the_last_summary_line_counts():
    log = "collected 3 items\n\n1 passed in 0.1s\n... rerun ...\n= 2 failed, 1 passed in 0.30s =\n"
    assert _c(log) == (1, 2, 0, 0, 0, 0, 0)


def test_junit_path_and_report(tmp_path):
    assert junit_path("python -m pytest -q --junitxml=out/j.xml tests") == "out/j.xml"
    assert junit_path("pytest --junit-xml r.xml") == "r.xml" and junit_path("pytest -q") is None
    (tmp_path / "j.xml").write_text(  # the attributes pytest 9 wrote for 7 tests: 1 failure, 1 error, 2 skips
        '<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="1" '
        'failures="1" skipped="2" tests="7" time="0.301"></testsuite></testsuites>')
    t = junit_counts(tmp_path / "j.xml")
    assert (t.passed, t.failed, t.skipped, t.errors, t.source) == (3, 1, 2, 1, "junit j.xml")
    (tmp_path / "bad.xml").write_text("<html>")
    assert junit_counts(tmp_path / "bad.xml") is None and junit_counts(tmp_path / "none.xml") is None


def test_a_live_pytest_run_read_end_to_end(tmp_path):
    (tmp_path / "test_k.py").write_text("import pytest\ndef test_a(): pass\ndef test_b(): assert 0\n"
                                        "@pytest.mark.skip\ndef test_c(): pass\n")
    cmd = f"{sys.executable} -m pytest -q -p no:cacheprovider test_k.py --junitxml=r.xml"
    log = tmp_path / "correctness.log"
    with log.open("w") as f:
        r = subprocess.run(cmd.split(), cwd=tmp_path, stdout=f, stderr=subprocess.STDOUT, check=False)
    run = correctness_run(cmd, r.returncode, False, 1.5, str(log), tmp_path)
    assert (run.ok, run.exit_code, run.passed, run.failed, run.skipped, run.errors) == (False, 1, 1, 1, 1, 0)
    assert run.counts_from == "junit r.xml" and run.wall_s == 1.5
    plain = correctness_run("pytest -q", r.returncode, False, 1.5, str(log), tmp_path)  # no junit: the log's line
    assert (plain.passed, plain.failed, plain.skipped, plain.counts_from) == (1, 1, 1, "pytest summary line")
