"""`kopt-mcp init` within a time budget, with progress on stderr (issue 35): a slow benchmark and a slow
test file in a temporary git repository; the per-test limit; the saved proposal that `--write` writes."""

from __future__ import annotations

import re
import subprocess
import time
import tomllib
from pathlib import Path

from kopt_mcp.app.cli import main
from kopt_mcp.config import TargetConfig

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}

#: writes results/bench.csv after `sleep` seconds; counts its runs in the file named by argv[1], if any
BENCH = """import sys, time, os
time.sleep({sleep})
if len(sys.argv) > 1:
    open(sys.argv[1], "a").write("run\\n")
os.makedirs("results", exist_ok=True)
with open("results/bench.csv", "w") as f:
    f.write("n,us_per_call,err_count\\n1,100.5,0\\n2,200.25,0\\n")
"""
TESTS = """import time

def test_kern_fast():
    assert 1 + 1 == 2

def test_kern_slow():
    time.sleep({slow})
"""


def _repo(root: Path, bench_sleep: float, test_sleep: float) -> Path:
    root.mkdir()
    (root / "bench.py").write_text(BENCH.format(sleep=bench_sleep))
    (root / "tests").mkdir()
    (root / "tests" / "test_kern.py").write_text(TESTS.format(slow=test_sleep))
    (root / "kern.py").write_text("def kern(x):\n    return x\n")
    (root / ".gitignore").write_text("results/\n__pycache__/\n")
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    subprocess.run(["git", "commit", "-q", "-m", "x"], cwd=root, check=True, env=GIT_ENV)
    return root


def test_init_ends_within_its_budget_and_writes_what_it_could_not_check_as_not_checked(tmp_path, capsys):
    repo = _repo(tmp_path / "repo", bench_sleep=2, test_sleep=300)
    budget = 20.0
    t0 = time.monotonic()
    code = main(["init", "--repo", str(repo), "--command", "python bench.py", "--budget", str(budget),
                 "--test-timeout", "0", "--write"])
    wall = time.monotonic() - t0
    err = capsys.readouterr().err
    assert code == 0
    assert wall < budget + 8, wall  # the slow test file was cut at the budget, its process tree killed
    text = (repo / "kopt.toml").read_text()
    cfg = TargetConfig.model_validate(tomllib.loads(text))  # the marked proposal still loads
    assert cfg.correctness.command.endswith("tests/test_kern.py")
    assert "# NOT CHECKED (init's budget ran out): the correctness command" in text
    assert "# NOT CHECKED: init's budget (20 s) ran out after" in text
    # progress on stderr: each benchmark run, the expected rest, the test selection, the hand-run command
    assert "benchmark run 1/2: `python bench.py`" in err and "expected for the rest: ~" in err
    assert "correctness tests: 1 file(s) of the kernel's topic (tests/test_kern.py)" in err
    assert re.search(r"tests: [01]/2 test\(s\) done", err)  # the running count where the budget cut the run
    assert "NOT CHECKED (the budget of 20 s ran out): the correctness command" in err
    assert f"run by hand: {cfg.correctness.command}" in err


def test_a_slow_first_run_leaves_no_time_for_a_second_one(tmp_path, capsys):
    repo = _repo(tmp_path / "repo", bench_sleep=4, test_sleep=0)
    assert main(["init", "--repo", str(repo), "--command", "python bench.py", "--budget", "12"]) == 0
    out, err = capsys.readouterr()
    assert "benchmark run 2/2 skipped: one run took" in err
    assert "# NOT CHECKED (init's budget ran out): a second run of the benchmark" in out


def test_a_test_past_the_per_test_limit_is_dropped_and_the_wall_time_reported(tmp_path, capsys):
    repo = _repo(tmp_path / "repo", bench_sleep=0, test_sleep=60)
    t0 = time.monotonic()
    assert main(["init", "--repo", str(repo), "--command", "python bench.py", "--test-timeout", "2"]) == 0
    assert time.monotonic() - t0 < 50
    out, err = capsys.readouterr()
    cfg = TargetConfig.model_validate(tomllib.loads(out))
    assert "--deselect tests/test_kern.py::test_kern_slow" in cfg.correctness.command
    assert "# dropped: tests/test_kern.py::test_kern_slow: too slow:" in out
    assert "# wall time of one run: " in out and "(it runs once per candidate)" in out
    assert "per-test limit: 2 s (pytest-timeout)" in err and "NOT CHECKED" not in out


def test_write_after_init_writes_the_proposal_it_showed_without_running_again(tmp_path, capsys):
    repo = _repo(tmp_path / "repo", bench_sleep=0, test_sleep=0)
    count = tmp_path / "runs.txt"
    cmd = f"python bench.py {count}"
    assert main(["init", "--repo", str(repo), "--command", cmd]) == 0
    shown = capsys.readouterr().out
    assert count.read_text().count("run") == 2
    assert main(["init", "--repo", str(repo), "--command", cmd, "--write"]) == 0
    assert "writing the proposal init made for the same flags on this tree" in capsys.readouterr().err
    assert (repo / "kopt.toml").read_text() == shown and count.read_text().count("run") == 2  # nothing ran
    (repo / "kopt.toml").unlink()
    (repo / "kern.py").write_text("def kern(x):\n    return x + 0\n")  # another tree: init runs again
    assert main(["init", "--repo", str(repo), "--command", cmd, "--write"]) == 0
    assert count.read_text().count("run") == 4


def test_init_and_check_config_show_the_interpreter_python_resolves_to(tmp_path, capsys):
    repo = _repo(tmp_path / "repo", bench_sleep=0, test_sleep=0)
    assert main(["init", "--repo", str(repo), "--command", "python bench.py", "--write"]) == 0
    capsys.readouterr()
    found, version = subprocess.run(
        ["bash", "-c", "python -c 'import sys; print(sys.executable); print(sys.version.split()[0])'"], cwd=repo,
        capture_output=True, text=True, check=True).stdout.split()
    assert f"# found: interpreter: python -> {found} ({version}" in (repo / "kopt.toml").read_text()
    assert main(["check-config", "--repo", str(repo)]) == 0
    out = capsys.readouterr().out
    assert f"interpreter: python -> {found} ({version}" in out
