"""Fixtures of the referee tests: a toy session profiled by the replayed CUPTI profiler."""

from __future__ import annotations

import pytest

from kopt_mcp.testing.toy import set_kernel, toy_runs_dir
from tests.conftest import BASE_TIMES
from tests.replay_cupti import ReplayCupti


@pytest.fixture
def cupti_ref(toy_repo, make_referee, monkeypatch):
    """A Referee on the toy repo with the replayed CUPTI profiler; BEST's kernel.py sets its GPU
    times before the baseline is taken (the baseline profiles BEST 4 times)."""

    def make(best_gpu_us, **flags):
        set_kernel(toy_repo, BASE_TIMES, GPU_US=best_gpu_us, **flags)
        import subprocess
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "gpu times"],
                       cwd=toy_repo, check=True)
        r = make_referee(toy_repo)
        monkeypatch.setattr(r, "profiler", lambda detail=False: ReplayCupti(toy_runs_dir(toy_repo)))
        r.run_benchmark()
        return r

    return make
