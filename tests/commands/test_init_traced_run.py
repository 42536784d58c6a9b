"""Issue 35 item 4: under a profiler whose runs are script-metric runs (`measures_script`: CUPTI),
init's last benchmark run runs under it and its trace names the target kernels (no separate
profiled run), and the baseline adopts that run only where the session's profiler is the same one.

The profiler is tests/replay_units.py's (it runs the benchmark, then writes a planted format-3
trace read by the real parser); runs are counted from the toy benchmark's per-content counter,
init's record and the session's records. Nothing here decides a verdict, so CPU load cannot flip it."""

from __future__ import annotations

import subprocess

from kopt_mcp import init_runs
from kopt_mcp.app.cli import main
from kopt_mcp.commands.init import profiled as profiled_mod
from kopt_mcp.commands.init import propose as propose_mod
from kopt_mcp.commands.init.runs import run_twice
from kopt_mcp.profilers import NoProfiler
from kopt_mcp.referee.baseline_adopt import ADOPTED_FILE, TRACE_DIR
from kopt_mcp.testing.toy import make_toy_repo, set_kernel, toy_runs_dir
from tests.conftest import BASE_TIMES
from tests.replay_units import ReplayUnits

UNITS = {"1": 10.0, "2": 20.0}
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]


def _toy(tmp_path):
    repo = make_toy_repo(tmp_path / "repo", BASE_TIMES)
    set_kernel(repo, BASE_TIMES, UNIT_US=UNITS)
    (repo / "kopt.toml").unlink()  # init proposes its own
    subprocess.run([*GIT, "commit", "-qam", "units"], cwd=repo, check=True)
    return repo


def _processes(repo) -> int:
    return sum(f.stat().st_size for f in toy_runs_dir(repo).glob("*.runs"))


class FailingUnits(ReplayUnits):
    """The benchmark runs, then the profiler's step exits 3 (a profiler that breaks the run)."""

    def wrap(self, command, out_dir):
        return f"{command} && exit 3"


def test_the_last_run_is_traced_and_names_the_kernels(tmp_path):
    repo = _toy(tmp_path)
    runs = run_twice(repo, "python bench.py", 60, profiler=ReplayUnits(tmp_path / "units"))
    assert [r.profiler for r in runs] == ["", "cupti"] and runs[0].kernels is None
    assert runs[1].kernels[0] == "fwd_kernel" and "torch_sum" in runs[1].kernels
    assert runs[0].files.keys() == runs[1].files.keys() == {"results/bench.csv"}
    assert _processes(repo) == 2 and not (repo / "results" / "bench.csv").exists()  # put back
    assert propose_mod.traced_targets(runs, repo, None)[0] == "^fwd_kernel$"


def test_a_profiled_run_that_fails_runs_again_plain(tmp_path):
    repo = _toy(tmp_path)
    runs = run_twice(repo, "python bench.py", 60, profiler=FailingUnits(tmp_path / "units"))
    assert [r.profiler for r in runs] == ["", ""] and runs[1].kernels is None
    assert _processes(repo) == 3 and not (repo / "results" / "bench.csv").exists()
    assert propose_mod.traced_targets(runs, repo, None) is None  # the separate profiled run names them


def _init_with(monkeypatch, repo, prof) -> init_runs.InitRecord:
    monkeypatch.setattr(propose_mod, "script_profiler", lambda profile, command: prof)
    monkeypatch.setattr(profiled_mod, "kernel_regex", lambda *a, **k: (None, "no second profiled run in this test"))
    assert main(["init", "--repo", str(repo), "--command", "python bench.py", "--write", "--force"]) == 0
    rec, why = init_runs.load(repo)
    assert rec is not None, why
    return rec


def _referee(make_referee, repo, monkeypatch, prof):
    ticks = iter(range(0, 10**9, 3600))
    ref = make_referee(repo, clock=lambda: float(next(ticks)), sleep=lambda s: None)
    monkeypatch.setattr(ref, "profiler", lambda detail=False: prof)
    assert ref.run_benchmark().baseline_recorded
    base = [e for e in ref.books.store.ledger() if e["event"] == "baseline"][0]
    dirs = [d for d in ref.books.store.runs.iterdir() if d.name.startswith("0000-baseline")]
    return base, dirs


def test_fresh_init_then_a_baseline_of_three_profiled_runs_and_inits_trace(tmp_path, make_referee, monkeypatch):
    repo = _toy(tmp_path)
    rec = _init_with(monkeypatch, repo, ReplayUnits(tmp_path / "units"))
    assert [r.profiler for r in rec.runs] == ["", "cupti"]
    assert not rec.runs[0].trace and any(n.startswith("cupti-") for n in rec.runs[1].trace)
    assert "fwd_kernel" in (repo / "kopt.toml").read_text()  # the traced run named the target
    base, dirs = _referee(make_referee, repo, monkeypatch, ReplayUnits(toy_runs_dir(repo)))
    assert (base["adopted_runs"], base["profiled_runs"], len(base["runs"])) == (2, 1, 3)
    assert (base["adopted_profiles"], len(base["gpu_profiles_us"])) == (1, 4)
    assert sum((d / ADOPTED_FILE).is_file() for d in dirs) == 2
    assert [d.name for d in dirs if (d / TRACE_DIR).is_dir()] == ["0000-baseline-init2"]
    assert sum("profile" in d.name for d in dirs) == 3 and len(dirs) == 5  # no plain run measured
    # the whole path from a fresh clone: 2 runs of init + 3 profiled runs (was 2 + 1 profiled + 1 + 4, then 2 + 4)
    assert _processes(repo) == 5


def test_inits_trace_stands_only_where_its_record_holds_it(tmp_path, make_referee, monkeypatch):
    repo = _toy(tmp_path)
    _init_with(monkeypatch, repo, ReplayUnits(tmp_path / "units"))
    rec, _ = init_runs.load(repo)
    init_runs.save(repo, rec.model_copy(update={"runs": [r.model_copy(update={"trace": {}}) for r in rec.runs]}))
    base, dirs = _referee(make_referee, repo, monkeypatch, ReplayUnits(toy_runs_dir(repo)))
    assert (base["adopted_runs"], base["adopted_profiles"], len(base["gpu_profiles_us"])) == (2, 0, 4)
    assert _processes(repo) == 6


def test_a_session_without_that_profiler_adopts_only_the_plain_run(tmp_path, make_referee, monkeypatch):
    repo = _toy(tmp_path)
    _init_with(monkeypatch, repo, ReplayUnits(tmp_path / "units"))
    base, dirs = _referee(make_referee, repo, monkeypatch, NoProfiler())
    assert (base["adopted_runs"], base["profiled_runs"], len(base["runs"])) == (1, 0, 3)
    adopted = [d for d in dirs if (d / ADOPTED_FILE).is_file()]
    assert [d.name for d in adopted] == ["0000-baseline-init1"]
