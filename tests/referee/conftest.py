"""Fixtures of the referee tests: a toy session profiled by the replayed CUPTI profiler."""

from __future__ import annotations

import subprocess

import pytest

from kopt_mcp.testing.toy import set_kernel, toy_runs_dir
from tests.conftest import BASE_TIMES
from tests.replay_cupti import ReplayCupti


@pytest.fixture
def replayed_ref(toy_repo, make_referee, monkeypatch):
    """make(profiler_class, **flags): a Referee on the toy repo whose profiler is a replay
    (tests/replay_cupti.py, tests/replay_units.py); BEST's kernel.py gets `flags` (its GPU times)
    committed before the baseline is taken (the baseline profiles BEST 4 times)."""

    def make(profiler_class, **flags):
        set_kernel(toy_repo, BASE_TIMES, **flags)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "gpu times"],
                       cwd=toy_repo, check=True)
        r = make_referee(toy_repo)
        monkeypatch.setattr(r, "profiler", lambda detail=False: profiler_class(toy_runs_dir(toy_repo)))
        r.run_benchmark()
        return r

    return make


@pytest.fixture
def cupti_ref(replayed_ref):
    """make(best_gpu_us, **flags): a Referee with the replayed CUPTI profiler, BEST at `best_gpu_us`."""
    return lambda best_gpu_us, **flags: replayed_ref(ReplayCupti, GPU_US=best_gpu_us, **flags)
