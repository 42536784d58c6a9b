"""Preflight (kopt_mcp/bench/preflight.py): before a session waits for a device or runs anything,
`serve` and `check-config` say that a command cannot start, and why. Real interpreters: a venv
without pytest stands for a machine where the test runner is not installed (issue 25: read as "the
tests fail")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kopt_mcp.app.cli import main, open_session
from kopt_mcp.bench.preflight import command_problems, command_words, runner_problems
from kopt_mcp.errors import PreflightError, StartupError

GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> Path:
    """The interpreter of a fresh venv without pip, so without pytest."""
    d = tmp_path_factory.mktemp("venv") / "nopytest"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(d)], check=True, capture_output=True)
    return d / "bin" / "python"


def _correctness(repo: Path, command: str) -> None:
    cfg = repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace("[profiler]", f"[correctness]\ncommand = {command!r}\n\n[profiler]"))
    subprocess.run([*GIT, "commit", "-qam", "correctness"], cwd=repo, check=True)


def test_pytest_not_installed_in_the_tests_interpreter_is_said_so(tmp_path, bare_python):
    p = runner_problems(f"PYTHONPATH=src${{PYTHONPATH:+:$PYTHONPATH}} {bare_python} -m pytest -q tests", tmp_path)
    assert len(p) == 1 and p[0].startswith(f"the test runner is not installed in {bare_python}")
    assert f"`{bare_python} -m pip install pytest`" in p[0]
    assert runner_problems(f"{sys.executable} -m pytest -q tests", tmp_path) == []
    assert runner_problems(f"{bare_python} bench.py", tmp_path) == []  # no pytest in it: nothing to check
    assert "`pytest` is not on PATH" in runner_problems("./nowhere/pytest -q", tmp_path)[0]


def test_the_files_a_command_names_must_exist(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "rms_norm.py").write_text("")
    ok = 'PYTHONPATH=. python -c "import runpy; runpy.run_path(\'benchmarks/rms_norm.py\', run_name=\'__main__\')"'
    assert command_problems(ok, tmp_path) == []
    assert "benchmarks/gone.py, which does not exist" in command_problems(ok.replace("rms_norm.py", "gone.py"), tmp_path)[0]
    assert "tests/test_x.py, which does not exist" in command_problems("python -m pytest -q tests/test_x.py::test_a",
                                                                       tmp_path)[0]
    assert command_words("A=1 B='x y' python -m pytest -q") == (["python", "-m", "pytest", "-q"], "A=1 B='x y' ")


def test_check_config_reports_the_missing_test_runner(toy_repo, bare_python, capsys):
    _correctness(toy_repo, f"{bare_python} -m pytest -q")
    assert main(["check-config", "--repo", str(toy_repo)]) == 2
    assert f"[correctness] the test runner is not installed in {bare_python}" in capsys.readouterr().out


def test_serve_refuses_to_open_before_any_run_and_every_tool_says_why(toy_repo, bare_python, make_referee):
    _correctness(toy_repo, f"{bare_python} -m pytest -q")
    with pytest.raises(PreflightError, match=f"the test runner is not installed in {bare_python}"):
        make_referee(toy_repo)
    runs = toy_repo.parent / f".{toy_repo.name}-toy-runs"
    assert not runs.exists() or not any(runs.iterdir())  # nothing ran: no benchmark, no wait for a device
    err = open_session(toy_repo, None, "t2")
    assert isinstance(err, StartupError) and "the test runner is not installed in" in str(err)
    assert "the tests fail" not in str(err)


def test_serve_refuses_a_benchmark_script_that_is_not_there(toy_repo, make_referee):
    cfg = toy_repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace('command = "python bench.py"', 'command = "python benchmark/missing.py"'))
    subprocess.run([*GIT, "commit", "-qam", "moved"], cwd=toy_repo, check=True)
    with pytest.raises(PreflightError, match="benchmark/missing.py, which does not exist"):
        make_referee(toy_repo)


def test_the_interpreter_a_command_resolves_to_under_its_own_assignments(tmp_path):
    """An agent's check-config passed while `python` was another interpreter on PATH (issue 35): the
    interpreter is resolved as the command would run it, its leading assignments included."""
    import os

    from kopt_mcp.bench.preflight import interpreter_line, interpreter_word, resolved_interpreter

    (tmp_path / "bin").mkdir()
    os.symlink(sys.executable, tmp_path / "bin" / "python")
    cmd = f"PATH={tmp_path / 'bin'}:$PATH python bench.py"
    path, version, has = resolved_interpreter(cmd, tmp_path, "pytest")
    assert (path, version, has) == (str(tmp_path / "bin" / "python"), sys.version.split()[0], True)
    assert resolved_interpreter(cmd, tmp_path, "no_such_module_xyz")[2] is False
    assert interpreter_line(cmd, tmp_path) == f"python -> {tmp_path / 'bin' / 'python'} ({sys.version.split()[0]})"
    assert interpreter_word("/opt/venv/bin/python3.11 -m pytest") == "/opt/venv/bin/python3.11"
    assert interpreter_word("bash run.sh") == "python"
