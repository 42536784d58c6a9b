"""What a profiled run puts in the benchmark's environment (profilers/base.profile_env): KOPT_PROFILE=1
only under a profiler whose runs are not also the verdict's script-metric runs. Under the CUPTI trace
every run of a verdict is profiled and its results are the script metric, so a benchmark that times
less under KOPT_PROFILE (as docs/config.md invites, and the Triton example did) would hand the
verdict a placeholder: on an H100 (2026-11-27) that made a +19.4% GPU-time win `regressed`."""

from __future__ import annotations

from pathlib import Path

from kopt_mcp.bench.measure import profile
from kopt_mcp.config import load_config
from kopt_mcp.evidence.trace import KernelTrace
from kopt_mcp.profilers.base import profile_env
from kopt_mcp.profilers.cupti import CuptiProfiler
from kopt_mcp.profilers.ncu import NcuProfiler
from kopt_mcp.testing.toy import RecordingRunner, make_toy_repo


class _Trace:
    """A profiler that runs the command as it is (no tool) and reports an empty trace; `measures_script`
    as the class says (the two kinds of profiler in kopt_mcp.profilers)."""

    name, per_launch = "stand-in", True

    def __init__(self, measures_script: bool) -> None:
        self.measures_script = measures_script

    def available(self) -> bool:
        return True

    def wrap(self, command: str, out_dir: Path) -> str:
        return command

    def parse(self, out_dir: Path) -> KernelTrace:
        return KernelTrace(backend=self.name, kernels=[], total_gpu_us=0.0)


def test_the_real_profilers_say_which_runs_are_script_metric_runs():
    assert profile_env(CuptiProfiler()) == {}
    assert profile_env(NcuProfiler()) == {"KOPT_PROFILE": "1"}


def test_a_run_whose_results_are_the_script_metric_gets_no_kopt_profile(tmp_path):
    repo = make_toy_repo(tmp_path / "repo", {"main": 100.0})
    cfg = load_config(repo / "kopt.toml").target
    seen = {}
    for measures_script in (True, False):
        runner = RecordingRunner()
        run_dir = tmp_path / f"run-{measures_script}"
        run_dir.mkdir()
        p = profile(cfg, _Trace(measures_script), repo, run_dir, {"KOPT_X": "1"}, run=runner)
        assert p.measurement is not None and p.measurement.run.exit_code == 0
        seen[measures_script] = runner.calls[0][2]
    assert "KOPT_PROFILE" not in seen[True] and seen[True]["KOPT_X"] == "1"
    assert seen[False]["KOPT_PROFILE"] == "1"
