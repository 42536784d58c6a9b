"""Every verdict carries the [correctness] command's outcome (VerdictResult.correctness and the ledger's
attempt record): exit status, wall time (s) and the pytest counts. The toy's test file checks the
kernel's declared errors, so a candidate passes or fails it by construction."""

from __future__ import annotations

import subprocess
import sys

from kopt_mcp.testing.toy import set_kernel

TESTS = """import kernel
def test_no_errors():
    assert not kernel.ERRORS
def test_times_positive():
    assert all(v > 0 for v in kernel.TIMES.values())
"""


def _with_tests(repo):
    (repo / "test_kernel.py").write_text(TESTS)
    with (repo / "kopt.toml").open("a") as f:
        f.write(f'\n[correctness]\ncommand = "{sys.executable} -m pytest -q -p no:cacheprovider test_kernel.py"\n')
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qm", "tests"], cwd=repo, check=True)


def test_a_verdict_carries_the_correctness_counts_and_wall_time(toy_repo, make_referee):
    _with_tests(toy_repo)
    r = make_referee(toy_repo)
    r.run_benchmark()
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    v = r.save_and_test("global", "halve")
    c = v.correctness
    assert v.verdict == "improved" and c is not None
    assert (c.ok, c.exit_code, c.passed, c.failed, c.skipped, c.counts_from) == (True, 0, 2, 0, 0, "pytest summary line")
    assert c.wall_s > 0 and c.log_path.endswith("correctness.log")
    r.revert_to_best()
    # an error outside the benchmark's classes: every row is correct, the test command fails
    set_kernel(r.where.workspace_path, {"1": 100.0, "2": 200.0}, errors={"x": 1})
    v = r.save_and_test("global", "breaks the tests")
    c = v.correctness
    assert (v.verdict, v.code) == ("incorrect", "check_failed")
    assert (c.ok, c.exit_code, c.passed, c.failed) == (False, 1, 1, 1)
    rec = [e for e in r.books.store.ledger() if e["event"] == "attempt"][-1]
    assert rec["correctness"]["failed"] == 1 and rec["correctness"]["passed"] == 1


def test_without_a_correctness_command_the_field_is_null(ref):
    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0})
    v = ref.save_and_test("global", "halve")
    assert v.verdict == "improved" and v.correctness is None
