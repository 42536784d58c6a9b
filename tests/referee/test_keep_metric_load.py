"""The screen-then-profile flow (ncu's: the GPU-time triple BEST, candidate, BEST again after the
script rounds) reads the foreign load of its profiled runs as the every-run-profiled flow does
(rules/load.py): a triple with a run under load is profiled once more in its place, and two under
load decide nothing (code under_load). The load comes from a sampler backend that reports another
compute process on the GPU for the runs the replayed profiler marks, so nothing here depends on the
machine's own load."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from kopt_mcp.evidence.load import ForeignProcess, RunLoad
from kopt_mcp.referee.services import Services
from kopt_mcp.testing.toy import set_kernel, toy_runs_dir
from tests.conftest import BASE_TIMES
from tests.replay_cupti import ReplayCupti

FASTER = {"1": 95.0, "2": 190.0}  # the script metric: a clear 5% win on both classes


class _Marked(ReplayCupti):
    """The replayed CUPTI trace in the screen-then-profile flow; each profiled run touches `flag` first."""

    def __init__(self, runs_dir: Path, flag: Path) -> None:
        super().__init__(runs_dir)
        self.flag = flag

    def wrap(self, command: str, out_dir: Path) -> str:
        return f"touch {shlex.quote(str(self.flag))}; {super().wrap(command, out_dir)}"


class _Sampler:
    """A load sampler (kopt_mcp.gpus.load's protocol): another compute process on the GPU during a
    run that touched the flag while `armed[0]` > 0 (one fewer each time), none otherwise."""

    def __init__(self, flag: Path, armed: list[int]) -> None:
        self.flag, self.armed = flag, armed

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def summary(self) -> RunLoad:
        marked = self.flag.exists()
        self.flag.unlink(missing_ok=True)
        if marked and self.armed[0] > 0:
            self.armed[0] -= 1
            return RunLoad(device="gpu", samples=3, util_pct=99.0,
                           processes=[ForeignProcess(pid=4242, name="python3", mem_mib=810.0)])
        return RunLoad(device="gpu", samples=3, util_pct=40.0)


def _referee(toy_repo, make_referee, monkeypatch, tmp_path, armed: list[int]):
    flag = tmp_path / "profiled-run"
    set_kernel(toy_repo, BASE_TIMES, GPU_US=1000.0)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "gpu"],
                   cwd=toy_repo, check=True)
    r = make_referee(toy_repo, services=Services(loads=lambda vendor, uuid, probe: lambda: _Sampler(flag, armed)))
    monkeypatch.setattr(r, "profiler", lambda detail=False: _Marked(toy_runs_dir(toy_repo), flag))
    r.run_benchmark()
    set_kernel(r.where.workspace_path, FASTER, GPU_US=950.0)  # a 5% GPU win
    return r


def test_a_profiled_triple_under_load_is_profiled_again_and_the_clean_one_decides(toy_repo, make_referee,
                                                                                 monkeypatch, tmp_path):
    armed = [0]
    r = _referee(toy_repo, make_referee, monkeypatch, tmp_path, armed)
    armed[0] = 1  # BEST's first profile of the attempt ran beside another compute process
    v = r.save_and_test("global", "faster")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win")
    profiles = [d for d in v.run_dirs if "profile" in Path(d).name]
    assert len(profiles) == 6  # the loaded triple, then a clean one in its place
    assert "pid 4242 python3" in v.reason and armed == [0]


def test_two_profiled_triples_under_load_keep_nothing(toy_repo, make_referee, monkeypatch, tmp_path):
    armed = [0]
    r = _referee(toy_repo, make_referee, monkeypatch, tmp_path, armed)
    armed[0] = 99  # every profiled run from now on beside another compute process
    v = r.save_and_test("global", "faster")
    assert v.verdict != "improved" and v.code == "under_load"
    assert len([d for d in v.run_dirs if "profile" in Path(d).name]) == 6
