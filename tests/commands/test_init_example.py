"""`kopt-mcp init --write` on a fresh copy of examples/cpu_providers, unedited, then a session
(issue 25 item 5): the results carry two providers (tinynorm's own kernel and a NumPy reference)
and two kernels, the tests a package that is not installed and a test that spawns 4 ranks on a
machine with one device. The proposal must count tinynorm's rms_norm rows and run only tests that
pass; the session then records the baseline and an identical candidate is `tie`.

The example's benchmark counts bytecode instructions (no clock), so the verdicts are exact on a
loaded 2-core machine; the CPU gate (the CPU is the device) reads its clock as always having waited
long enough, so it measures at once."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

from kopt_mcp.app.cli import main
from kopt_mcp.commands.demo import prepare_repo
from kopt_mcp.config import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cpu_providers"
COMMAND = "PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} python benchmark/scripts/benchmark_rms_norm.py --overwrite"


def test_init_write_on_a_fresh_copy_gives_a_working_session(tmp_path, make_referee, capsys):
    repo = prepare_repo(EXAMPLE, tmp_path / "repo")
    assert main(["init", "--repo", str(repo), "--command", COMMAND, "--write"]) == 0
    text = (repo / "kopt.toml").read_text()
    cfg = load_config(repo / "kopt.toml").target
    b = cfg.benchmark
    assert b.rows == "kernel_name == 'rms_norm' and kernel_provider == 'tinynorm'"  # not numpy, not layer_norm
    assert (b.metric, b.config_columns) == ("instructions", ["x_value"])
    assert "# comparison rows (read, never judged): kernel_provider == 'numpy'" in text
    dropped = [line for line in text.splitlines() if line.startswith("# dropped: ")]
    assert [line.split(": ")[1:3] for line in dropped] == [
        ["test/dsl/test_rms_norm.py", "missing package"],
        ["test/test_rms_norm.py::test_sharded_rms_norm[4]", "needs more GPUs"]]
    assert cfg.correctness.command == (
        "PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} python -m pytest -q -x -p no:cacheprovider test/test_rms_norm.py "
        "--deselect 'test/test_rms_norm.py::test_sharded_rms_norm[4]'")
    # one test run stands for the narrowed command (issue 35): the same tests, the dropped ones left out
    assert "# init ran these tests on the unmodified tree: 5 passed, 1 skipped (in one run of 8 test outcome(s)" in text
    assert "left out: 1 whole file(s) (1 test outcome(s)), 1 failing or slow test(s)" in text
    # pyproject.toml holds [tool.pytest.ini_options]: it steers the tests, so it is protected too (issue 35)
    assert tomllib.loads(text)["protect"]["paths"] == ["benchmark/scripts/", "pyproject.toml", "test/"]
    assert "dropped from the correctness command" in capsys.readouterr().err

    ticks = iter(range(0, 10**9, 3600))  # each reading an hour later: the CPU gate never waits
    ref = make_referee(repo, clock=lambda: float(next(ticks)), sleep=lambda s: None)
    base = ref.run_benchmark()
    assert base.baseline_recorded, base.reason
    assert sorted(ref.status().best_metrics) == ["x_value=128", "x_value=256", "x_value=64"]
    kernel = ref.where.workspace_path / "src" / "tinynorm" / "rms_norm.py"
    kernel.write_text(kernel.read_text() + "\n# the same kernel, one comment longer\n")
    v = ref.save_and_test("global", "identical kernel: a comment")
    assert v.verdict == "tie", v.reason
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == "?? kopt.toml\n"
