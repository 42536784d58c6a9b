"""The correctness gate: timeout, exit code, metrics, rows, check command, in that order."""

from __future__ import annotations

from kopt_mcp.rules.correctness import RunFacts, correctness_gate
from kopt_mcp.rules.decision import Code


def facts(**kw) -> RunFacts:
    base = dict(exit_code=0, timed_out=False, timeout_s=60.0)
    base.update(kw)
    return RunFacts(**base)


def test_clean_run_passes():
    g = correctness_gate(facts())
    assert (g.kind, g.code) == ("ok", Code.RUN_OK)


def test_clean_run_with_passing_check_command_passes():
    assert correctness_gate(facts(check_exit=0)).kind == "ok"


def test_timeout_fails_and_names_the_limit():
    g = correctness_gate(facts(exit_code=None, timed_out=True, timeout_s=30.0))
    assert (g.kind, g.code) == ("failed", Code.RUN_TIMED_OUT)
    assert "timeout_s = 30 s" in g.reason  # the text is the product: it names the limit to raise


def test_nonzero_exit_fails_with_the_code():
    g = correctness_gate(facts(exit_code=3))
    assert (g.kind, g.code) == ("failed", Code.RUN_CRASHED)
    assert "code 3" in g.reason  # the text is the product: it names the exit code to look up


def test_no_exit_code_fails():
    g = correctness_gate(facts(exit_code=None))
    assert (g.kind, g.code) == ("failed", Code.RUN_CRASHED)


def test_metrics_error_fails_with_its_text():
    g = correctness_gate(facts(metrics_error="stale metrics: out.csv predate this run", metrics_problem="stale"))
    assert (g.kind, g.code) == ("failed", Code.RESULTS_STALE)
    assert g.reason == "stale metrics: out.csv predate this run"  # the reader's message, passed on: the product
    for problem, code in (("missing", Code.RESULTS_MISSING), ("unusable", Code.RESULTS_UNUSABLE)):
        assert correctness_gate(facts(metrics_error="x", metrics_problem=problem)).code == code


def test_failing_rows_are_incorrect_and_name_the_classes():
    g = correctness_gate(facts(failing_classes=["n=1", "n=4"]))
    assert (g.kind, g.code) == ("incorrect", Code.ROWS_INCORRECT)
    assert "n=1, n=4" in g.reason  # the text is the product: it names the classes to repair


def test_failing_check_command_is_incorrect():
    g = correctness_gate(facts(check_exit=1))
    assert (g.kind, g.code) == ("incorrect", Code.CHECK_FAILED)


def test_check_command_timeout_is_incorrect():
    g = correctness_gate(facts(check_timed_out=True))
    assert (g.kind, g.code) == ("incorrect", Code.CHECK_FAILED)


def test_timeout_is_checked_before_everything_else():
    g = correctness_gate(facts(exit_code=-9, timed_out=True, metrics_error="none", failing_classes=["a"], check_exit=1))
    assert (g.kind, g.code) == ("failed", Code.RUN_TIMED_OUT)


def test_exit_code_is_checked_before_metrics():
    g = correctness_gate(facts(exit_code=1, metrics_error="no file matching", failing_classes=["a"]))
    assert (g.kind, g.code) == ("failed", Code.RUN_CRASHED)


def test_metrics_error_is_checked_before_rows():
    g = correctness_gate(facts(metrics_error="no file matching", metrics_problem="missing", failing_classes=["a"],
                               check_exit=1))
    assert (g.kind, g.code) == ("failed", Code.RESULTS_MISSING)


def test_rows_are_checked_before_the_check_command():
    g = correctness_gate(facts(failing_classes=["a"], check_exit=1))
    assert (g.kind, g.code) == ("incorrect", Code.ROWS_INCORRECT)


def test_failed_tests_are_read_from_a_real_pytest_run(tmp_path):
    """The ids come from what pytest itself prints (a real run on a small failing test file)."""
    import subprocess
    import sys

    from kopt_mcp.rules.correctness import failed_tests

    (tmp_path / "test_kernel.py").write_text(
        "import pytest\n"
        "def test_small():\n    assert 1 + 1 == 2\n"
        "@pytest.mark.parametrize('n', [64, 4096])\n"
        "def test_large(n):\n    assert n < 1000, 'max abs err 0.5'\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('setup failed')\n"
        "def test_setup(broken):\n    pass\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_kernel.py"],
                         cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 1
    ids = failed_tests(run.stdout)
    assert ids == ["test_kernel.py::test_large[4096]", "test_kernel.py::test_setup"], run.stdout[-800:]
    g = correctness_gate(RunFacts(exit_code=0, timed_out=False, timeout_s=60, check_exit=1, failed_tests=ids))
    assert (g.kind, g.code) == ("incorrect", Code.CHECK_FAILED)
    assert "test_large[4096]" in g.reason and "test_setup" in g.reason  # the product: the failed tests named
