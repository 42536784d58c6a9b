"""Init's run of the tests in a repository whose pytest settings turn live logging on
(`log_cli = true`), as flash-linear-attention's pyproject.toml does: its `assert_close` logs each
comparison at INFO, so pytest writes every test's outcome on a line of its own, after the live log
("PASSED    [ 25%]"), not after the node id. On one H200 (2026-12-03) init's running count of
`tests/modules/test_layernorm.py` read "0/150 test(s) done" for 255 s; a run cut by a limit was read
as no test done, and its file as not reached.

Init's plugin writes each test's start and end as it runs (kopt_mcp/commands/init/pytest_xfail_plugin.py),
which no output setting changes; the `-v` lines stay the fallback and read the split form too. Real
pytest runs in a planted repository; the slow test sleeps 120 s against a 30 s limit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kopt_mcp.commands.init.correctness import Drop, check_correctness, drop_lines
from kopt_mcp.commands.init.progress import Budget, Progress
from kopt_mcp.commands.init.pytest_report import parse_events, parse_progress, running_test
from kopt_mcp.commands.init.pytest_run import running_count

FIX = Path(__file__).parents[1] / "fixtures" / "init"
PYPROJECT = '[tool.pytest.ini_options]\nlog_cli = true\nlog_cli_level = "INFO"\n'
TESTS = (
    "import logging, time\nimport pytest\n\nlog = logging.getLogger('kern')\n\n"
    "@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_close(n):\n    log.info('close %d', n)\n\n"
    "def test_slow():\n    log.info('slow starts')\n    time.sleep(120)\n\n"
    "def test_after():\n    log.info('after')\n")


def _repo(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "pyproject.toml").write_text(PYPROJECT)
    (root / "tests" / "test_k.py").write_text(TESTS)
    return root


class _Said(Progress):
    def __init__(self) -> None:
        super().__init__(Budget(300), quiet=True)
        self.lines: list[str] = []

    def say(self, text: str) -> None:
        self.lines.append(text)


def test_a_run_cut_inside_a_logging_test_drops_that_test_only(tmp_path):
    repo, said = _repo(tmp_path), _Said()
    # a 30 s limit: the slow test holds the run for more than half of it (the hung path) even when pytest
    # takes 10 s to start on a loaded machine
    checked = check_correctness(repo, "", sys.executable, ["tests/test_k.py"], [], timeout_s=30, progress=said)
    assert [(d.target, d.kind) for d in checked.drops] == [("tests/test_k.py::test_slow", "too slow")]
    assert checked.runs == 2 and checked.summary.startswith("4 passed")
    assert checked.command.endswith("tests/test_k.py --deselect tests/test_k.py::test_slow")
    assert "tests: 3/5 test(s) done" in said.lines  # the cut run, counted from the plugin's lines
    assert subprocess.run(checked.command, shell=True, cwd=repo, capture_output=True).returncode == 0


def test_the_plugins_lines_give_outcomes_and_the_test_still_running():
    ev = parse_events((FIX / "pytest_events_killed.jsonl").read_text())
    outcomes = ev.done
    assert [(o.nodeid, o.outcome) for o in outcomes] == [
        ("tests/test_e.py::test_close[1]", "passed"), ("tests/test_e.py::test_close[2]", "passed"),
        ("tests/test_e.py::test_fails", "failed"), ("tests/test_e.py::test_skips", "skipped"),
        ("tests/test_e.py::test_xfails", "xfailed")]
    assert outcomes[2].message == "assert 2 == 3" and outcomes[3].message == "no device"
    assert outcomes[4].message == "known bug" and "tests/test_e.py:15: AssertionError" in outcomes[2].text
    assert ev.running == "tests/test_e.py::test_slow" and ev.last_t is not None
    assert ev.selected == [o.nodeid for o in outcomes] + ["tests/test_e.py::test_slow"]


def test_the_split_progress_lines_of_live_logging_are_read(tmp_path):
    log = (FIX / "pytest_verbose_live_log_killed.log").read_text()
    assert [(o.nodeid, o.outcome) for o in parse_progress(log)] == [
        ("tests/test_k.py::test_close[1]", "passed"), ("tests/test_k.py::test_close[2]", "passed"),
        ("tests/test_k.py::test_close[3]", "passed"), ("tests/test_k.py::test_quiet", "passed"),
        ("tests/test_k.py::test_fails", "failed")]
    assert running_test(log) == "tests/test_k.py::test_slow"
    (tmp_path / "junit.log").write_text(log)
    assert running_count(tmp_path / "junit.xml") == "5/7 test(s) done (1 failed)"


LONG = ("import time\nimport pytest\n\n@pytest.mark.parametrize('n', range(60))\n"
        "def test_case(n):\n    time.sleep(0.4)\n")


def test_a_long_file_cut_at_the_limit_stands_for_the_tests_it_finished(tmp_path):
    """60 cases of 0.4 s (24 s) against a 16 s limit: the run is cut while it is still finishing tests.
    It stands for the cases it finished (no second run); the rest, and a file it never reached, are
    left out as not reached. Before: the case it was inside took its whole function with it, so
    nothing of the file was left and init refused."""
    _repo(tmp_path)
    (tmp_path / "tests" / "test_k.py").write_text(LONG)
    (tmp_path / "tests" / "test_z.py").write_text("def test_z():\n    pass\n")
    checked = check_correctness(tmp_path, "", sys.executable, ["tests/test_k.py", "tests/test_z.py"], [], timeout_s=16)
    assert checked.runs == 1 and checked.ran
    assert {d.kind for d in checked.drops} == {"not reached"} and checked.drops[-1].target == "tests/test_z.py"
    cases = [d.target for d in checked.drops[:-1]]
    kept = int(checked.summary.split(" passed")[0])
    assert kept >= 1 and kept + len(cases) == 60
    assert cases == [f"tests/test_k.py::test_case[{n}]" for n in range(kept, 60)]  # the unfinished tail, in order
    assert "test(s) not finished when the run's limit ended it" in checked.within
    assert kept * 0.4 <= checked.seconds <= 16 + 2  # the finished cases' sleep, within the cut run (its kill takes a moment)
    done = subprocess.run(checked.command, shell=True, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0 and f"{kept} passed" in done.stdout


def test_the_unfinished_tail_of_one_function_shares_a_line():
    why = "not finished within init's 16 s limit for the tests (--tests-timeout)"
    drops = [Drop(target="t.py::f[19]", kind="not reached", detail=why),
             Drop(target="t.py::f[20-a]", kind="not reached", detail=why),
             Drop(target="t.py::g", kind="not reached", detail=why + " (10 case(s))"),
             Drop(target="t.py::h[1]", kind="failure", detail="fails"),
             Drop(target="t.py::h[2]", kind="not reached", detail=why)]
    assert drop_lines(drops) == [f"t.py::f[19], [20-a]: not reached: {why} (2 case(s))",
                                 f"t.py::g: not reached: {why} (10 case(s))", "t.py::h[1]: failure: fails",
                                 f"t.py::h[2]: not reached: {why}"]
    assert drop_lines(drops[:2], detail=False) == ["t.py::f[19], [20-a]: not reached"]
