"""Each profiled run's SM clock in the referee's keep metric (Services.clocks -> the job lease's
ClockSampler -> Profiled.clock -> rules/clocks.py). The clock source is a fake that reports, for
the profiled run going on, the level the test planted (idle between runs); GPU times come from the
recorded CUPTI trace replayed with set numbers (tests/replay_cupti.py). Levels and times are the
2026-11-24 H100's: 1980 and 1965 MHz, a 0.76% step."""

from __future__ import annotations

import subprocess

import pytest

from kopt_mcp.referee.services import Services
from kopt_mcp.testing.toy import set_kernel, toy_runs_dir
from tests.conftest import BASE_TIMES
from tests.replay_cupti import ReplayCupti

FASTER = {"1": 95.0, "2": 190.0}


class PlantedClocks:
    """The fake clock source: `levels[i]` MHz while profiled run i runs (busy), idle otherwise."""

    period_s = 0.002

    def __init__(self, levels):
        self.levels, self.runs, self.active = list(levels), 0, False

    def read(self):
        if not self.active:
            return 345.0, True
        return self.levels[min(self.runs - 1, len(self.levels) - 1)], False


class ClockedReplay(ReplayCupti):
    """ReplayCupti that tells the planted clocks when a profiled run starts and ends."""

    def __init__(self, runs_dir, clocks):
        super().__init__(runs_dir)
        self.clocks = clocks

    def wrap(self, command, out_dir):
        self.clocks.runs += 1
        self.clocks.active = True
        return super().wrap(command, out_dir)

    def parse(self, run_dir):
        self.clocks.active = False
        return super().parse(run_dir)


@pytest.fixture
def clocked(toy_repo, make_referee, monkeypatch):
    def make(best_gpu_us, levels, with_clocks=True):
        set_kernel(toy_repo, BASE_TIMES, GPU_US=best_gpu_us)
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "gpu times"],
                       cwd=toy_repo, check=True)
        planted = PlantedClocks(levels)
        r = make_referee(toy_repo, services=Services(clocks=(lambda vendor, uuid: planted) if with_clocks else None))
        monkeypatch.setattr(r, "profiler", lambda detail=False: ClockedReplay(toy_runs_dir(toy_repo), planted))
        r.run_benchmark()
        return r

    return make


# BEST: 4 baseline profiles at 1000 us, then 1000 before the candidate and 1007.6 after it (the clock
# stepped from 1980 to 1965 MHz); the candidate, 1% faster, 990 us at 1980 MHz
BEST_US = [1000.0] * 5 + [1007.6]
LEVELS = [1980.0] * 4 + [1980.0, 1980.0, 1965.0]


def test_a_clock_step_after_the_candidate_is_judged_at_the_candidates_clock_in_three_runs(clocked):
    r = clocked(BEST_US, LEVELS)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=990.0)
    v = r.save_and_test("global", "1% faster")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win"), v.reason
    assert v.gpu_delta_pct == pytest.approx(1.0, abs=0.001)  # against BEST's 1000 us at 1980 MHz only
    assert v.gpu_best_us == pytest.approx(50.0) and v.gpu_floor_pct == pytest.approx(0.2)  # the step is not spread
    assert "SM clock 1980 MHz, 1980 MHz, 1965 MHz (BEST, candidate, BEST)" in v.reason  # a report line: clocks shown
    assert sum("candidate-profile" in d for d in v.run_dirs) == 1  # A/B/A only
    assert len(r.books.state.gpu_spreads_pct) == 3  # the clock step is not noise: not added to the session's spreads


def test_without_clock_figures_the_same_step_costs_two_more_profiled_runs(clocked):
    r = clocked(BEST_US, LEVELS, with_clocks=False)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=990.0)
    v = r.save_and_test("global", "1% faster")
    # the 0.76% step doubled is a 1.51% floor: candidate and BEST are profiled once more (1007.6 both times)
    assert sum("candidate-profile" in d for d in v.run_dirs) == 2
    assert "SM clock" not in v.reason  # a report line: no clock shown where none was measured
    assert any("moved 0.757% between its profiles" in w for w in v.warnings)


def test_an_unchanged_kernel_that_ran_at_a_higher_clock_is_not_kept(clocked):
    # BEST at 1965 MHz throughout (1007.6 us); the candidate changed the script side only and ran at
    # 1980 MHz: its kernel's 1000 us is the clock, not a win
    r = clocked([1007.6] * 6, [1965.0] * 5 + [1980.0, 1965.0])
    set_kernel(r.where.workspace_path, FASTER, GPU_US=1000.0)
    v = r.save_and_test("global", "same kernel")
    assert v.verdict != "improved" and v.code in ("gpu_time_below_floor", "gpu_time_not_improved"), v.reason
    assert abs(v.gpu_delta_pct) < 0.01  # 0.76% faster as measured, less the clock ratio to BEST's clock
