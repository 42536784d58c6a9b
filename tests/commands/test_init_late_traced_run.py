"""Issue 35 item 4: where init's budget skips the second benchmark run before the tests (a long
benchmark), that run is made after the tests under CUPTI (runs.traced_late_run): its results count as
the second run, its trace names the target kernels and stands for one of the baseline's profiled
runs. Before, init made a separate profiled run there and threw its results and trace away (Liger
FusedLinearCrossEntropy on an H200, 2026-12-03: 215 s), and the baseline made that run again.

The budget's skip is planted (run_twice with one run, and the NOT CHECKED line it writes), so no
clock decides what is asserted; the profiler is tests/replay_units.py's."""

from __future__ import annotations

import pytest

from kopt_mcp import init_runs
from kopt_mcp.app.cli import main
from kopt_mcp.commands.init import profiled as profiled_mod
from kopt_mcp.commands.init import propose as propose_mod
from kopt_mcp.commands.init import runs as runs_mod
from kopt_mcp.commands.init.runs import SECOND_RUN
from kopt_mcp.testing.toy import toy_runs_dir
from tests.commands.test_init_traced_run import FailingUnits, _processes, _referee, _toy
from tests.replay_units import ReplayUnits


@pytest.fixture
def skipped(monkeypatch):
    """init's run_twice as where the budget skips run 2: one plain run, the second marked NOT CHECKED;
    and the separate profiled run's calls (it names `^sep$`)."""
    def once(repo, command, timeout_s=600.0, runs=2, budget=None, progress=None, profiler=None):
        out = runs_mod.run_twice(repo, command, timeout_s, 1, budget, progress, profiler)
        budget.not_checked(SECOND_RUN, command)
        return out

    separate: list[str] = []
    monkeypatch.setattr(propose_mod, "run_twice", once)
    monkeypatch.setattr(profiled_mod, "gpu_count", lambda: 1)
    monkeypatch.setattr(profiled_mod, "kernel_regex",
                        lambda repo, command, *a, **k: (separate.append(command) or ("^sep$", "separate run")))
    return separate


def _init(monkeypatch, repo, prof) -> init_runs.InitRecord:
    monkeypatch.setattr(propose_mod, "script_profiler", lambda profile, command: prof)
    assert main(["init", "--repo", str(repo), "--command", "python bench.py", "--write", "--force"]) == 0
    rec, why = init_runs.load(repo)
    assert rec is not None, why
    return rec


def test_the_skipped_second_run_runs_after_the_tests_under_cupti_and_stands_for_a_profile(
        tmp_path, make_referee, monkeypatch, skipped, capsys):
    repo = _toy(tmp_path)
    rec = _init(monkeypatch, repo, ReplayUnits(tmp_path / "units"))
    assert [r.profiler for r in rec.runs] == ["", "cupti"] and rec.runs[1].trace and skipped == []
    toml = (repo / "kopt.toml").read_text()
    assert 'kernel = "^fwd_kernel$"' in toml and "NOT CHECKED" not in toml
    assert "NOT CHECKED" not in capsys.readouterr().err
    assert not (repo / "results" / "bench.csv").exists()  # put back
    base, dirs = _referee(make_referee, repo, monkeypatch, ReplayUnits(toy_runs_dir(repo)))
    assert (base["adopted_runs"], base["adopted_profiles"], len(base["gpu_profiles_us"])) == (2, 1, 4)
    assert _processes(repo) == 5  # init's 2 runs + 3 profiled runs, as where the budget held both runs


def test_where_that_run_fails_under_the_profiler_it_counts_plain_and_a_separate_run_names_the_kernels(
        tmp_path, monkeypatch, skipped):
    repo = _toy(tmp_path)
    rec = _init(monkeypatch, repo, FailingUnits(tmp_path / "units"))
    assert [r.profiler for r in rec.runs] == ["", ""] and skipped == ["python bench.py"]
    assert 'kernel = "^sep$"' in (repo / "kopt.toml").read_text()
    assert _processes(repo) == 3  # run 1, the failing traced run and its plain rerun
