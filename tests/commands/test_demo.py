"""The main job as a test: `kopt-mcp demo` on the CPU example, over stdio, every verdict as expected."""

from __future__ import annotations

import subprocess
import sys


def test_cpu_demo_passes(tmp_path, lease_dir):
    r = subprocess.run([sys.executable, "-m", "kopt_mcp.app.cli", "demo", "--example", "cpu", "--keep", str(tmp_path)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert "demo passed" in r.stdout
    perf = (tmp_path / "cpu_softmax" / ".kopt" / "worktrees" / "demo" / "performance.md").read_text()
    assert perf.count("| keep |") == 6 and perf.count("| baseline |") == 3


def test_a_patch_that_no_longer_applies_stops_the_scenario_with_a_named_failure(tmp_path):
    # under load an earlier step may miss its verdict (e.g. a win reverted as tie); the next patch,
    # made against the kept tree, then does not apply: a failure line, not a traceback
    import anyio
    from rich.console import Console

    from kopt_mcp.commands.demo import Demo, prepare_repo

    example = tmp_path / "example"
    example.mkdir()
    (example / "kernel.py").write_text("x = 1\n")
    (example / "scenario.toml").write_text('[[step]]\nname = "p"\npatch = "p.patch"\nexpect = "improved"\n')
    (example / "p.patch").write_text("--- a/kernel.py\n+++ b/kernel.py\n@@ -1 +1 @@\n-x = 2\n+x = 3\n")
    repo = prepare_repo(example, tmp_path / "repo")
    demo = Demo(example, repo, Console(file=open(tmp_path / "out.txt", "w")))  # noqa: SIM115
    assert anyio.run(demo._step, None, repo, 1, demo.steps[0]) is False
    assert len(demo.failures) == 1 and "p.patch does not apply" in demo.failures[0]
    assert (repo / "kernel.py").read_text() == "x = 1\n"


def _played(tmp_path, step: str, verdict: str):
    """Demo._step on a one-step scenario whose save_and_test answers `verdict` (no server)."""
    import anyio
    from rich.console import Console

    from kopt_mcp.commands.demo import Demo, prepare_repo

    run = tmp_path / f"{verdict}-{len(list(tmp_path.iterdir()))}"
    example = run / "example"
    example.mkdir(parents=True)
    (example / "kernel.py").write_text("x = 1\n")
    (example / "scenario.toml").write_text(step)
    repo = prepare_repo(example, run / "repo")
    demo = Demo(example, repo, Console(file=open(run / "out.txt", "w")))  # noqa: SIM115

    async def answer(_c, _tool, _args=None):
        return {"verdict": verdict, "metric_used": "us", "rounds": 2, "reason": "r", "classes": [],
                "gpu_delta_pct": None}

    demo._call = answer
    assert anyio.run(demo._step, None, repo, 1, demo.steps[0]) is True
    return demo


def test_a_may_tie_step_passes_as_a_tie_and_fails_on_any_other_wrong_verdict(tmp_path):
    step = '[[step]]\nname = "split"\nexpect = "divergent"\nmay_tie = true\n'
    tied = _played(tmp_path, step, "tie")
    assert tied.failures == [] and len(tied.ties) == 1
    assert len(_played(tmp_path, step, "improved").failures) == 1  # a keep where none was expected: a failure
    strict = '[[step]]\nname = "split"\nexpect = "divergent"\n'
    d = _played(tmp_path, strict, "tie")
    assert len(d.failures) == 1 and d.ties == []
