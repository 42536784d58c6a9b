"""The keep metric with each run's SM clock (kopt_mcp/rules/clocks.py, rules/keep.judge_groups).

The numbers are the 2026-11-24 H100 do_bench runs: spin_kernel's median launch sat at 379.9 us
(1980 MHz) or 382.8 us (1965 MHz), the clock stepping between profiles; a -1% candidate ran 376.1
or 379.0 us. Launch times inside one run scatter by 0.02 us here (the recorded trials' medians
agreed within 0.1 us at one level)."""

from __future__ import annotations

import pytest

from kopt_mcp.evidence.clock import RunClock
from kopt_mcp.rules.clocks import clock_plan
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.keep import judge_groups
from tests.rules.conftest import clk
from tests.rules.conftest import spin_run as run

FAST, SLOW = 379.9, 382.8  # us at 1980 and 1965 MHz


def judge(b1, c, b2, clocks=None, **kw):
    return judge_groups(run(b1), run(c, calls=270), run(b2, calls=255), "spin_kernel",
                        recent_spreads_pct=[0.0, 0.008, 0.004], clocks=clocks, **kw)


def test_a_clock_step_between_best_profiles_no_longer_hides_a_1pct_win():
    # the recorded miss: BEST 379.9 us at 1980 MHz, the candidate 376.1 at 1980, BEST 382.8 at 1965
    plain = judge(FAST, 376.1, SLOW)
    assert not plain.kept and plain.floor.binding == "own_spread" and plain.floor.pct > 1.4
    d = judge(FAST, 376.1, SLOW, clocks=(clk(1980), clk(1980), clk(1965)))
    assert d.kept, d.reason
    assert d.gpu_delta_pct == pytest.approx(100 * (1 - 376.1 / 379.9), abs=1e-6)
    assert d.floor.pct == pytest.approx(0.2) and d.clock.reference == "before" and d.clock.spread_explained
    assert d.code == Code.GPU_TIME_WIN and d.groups[0].best_median_us == FAST  # BEST's profile before it only
    # the same at the other level, compared with the profile after it
    d = judge(FAST, 379.0, SLOW, clocks=(clk(1980), clk(1965), clk(1965)))
    assert d.kept and d.clock.reference == "after" and d.gpu_delta_pct == pytest.approx(100 * (1 - 379.0 / 382.8))
    assert d.groups[0].best_median_us == SLOW


def test_an_unchanged_candidate_at_a_higher_clock_is_not_kept():
    # the false keep the plain rule allows: both BEST profiles at 1965 MHz, the unchanged candidate at 1980
    plain = judge(SLOW, FAST, SLOW)
    assert plain.kept and plain.gpu_delta_pct == pytest.approx(0.758, abs=0.01)
    d = judge(SLOW, FAST, SLOW, clocks=(clk(1965), clk(1980), clk(1965)))
    assert not d.kept and d.clock.penalty_pct == pytest.approx(0.760, abs=0.001)
    assert abs(d.gpu_delta_pct) < 0.01 and d.code in (Code.GPU_TIME_BELOW_FLOOR, Code.GPU_TIME_NOT_IMPROVED)
    assert d.clock.reference == "both" and d.groups[0].best_median_us == SLOW
    # the same launch times at the higher clock: the penalty a keep pays is no loss (recorded H100 do_bench
    # processes of identical code read gpu_time_loss at -0.7% before this was fixed, 2026-11-27)
    same = judge(FAST, FAST, FAST, clocks=(clk(1965), clk(1980), clk(1965)))
    assert same.gpu_delta_pct == pytest.approx(-0.76, abs=0.01) and same.code == Code.GPU_TIME_NOT_IMPROVED
    # a real 1% win at the higher clock still clears it: 376.1 us at 1980 against 382.8 at 1965
    d = judge(SLOW, 376.1, SLOW, clocks=(clk(1965), clk(1980), clk(1965)))
    assert d.kept and d.gpu_delta_pct == pytest.approx(100 * (1 - 376.1 / 382.8) - 0.760, abs=0.01)


def test_a_candidate_at_a_lower_clock_is_judged_as_measured():
    # a 1% win that ran at 1965 MHz against BEST at 1980: its slower clock costs it 0.76%, no penalty added
    d = judge(FAST, 379.0, FAST, clocks=(clk(1980), clk(1965), clk(1980)))
    assert d.clock.penalty_pct == 0.0 and d.gpu_delta_pct == pytest.approx(100 * (1 - 379.0 / 379.9))
    assert d.clock.reference == "both" and d.kept and d.code == Code.GPU_TIME_WIN
    unchanged = judge(FAST, SLOW, FAST, clocks=(clk(1980), clk(1965), clk(1980)))
    assert not unchanged.kept and unchanged.gpu_delta_pct < -0.7 and unchanged.code == Code.GPU_TIME_NOT_IMPROVED
    assert unchanged.clock.credit_pct == pytest.approx(0.76, abs=0.01)  # its lower clock: no loss
    slower = judge(FAST, SLOW * 1.02, FAST, clocks=(clk(1980), clk(1965), clk(1980)))
    assert slower.code == Code.GPU_TIME_LOSS  # 2.8% slower at a 0.76% lower clock: a loss beyond it


def test_a_spread_the_clocks_do_not_explain_still_sets_the_floor():
    # BEST got slower at the higher clock: not a clock step, so twice the spread stays in the floor
    d = judge(FAST, 376.1, SLOW, clocks=(clk(1965), clk(1965), clk(1980)))
    assert not d.kept and not d.clock.spread_explained and d.floor.binding == "own_spread"
    # and a step three times what the clock ratio explains is not the clock either
    p = clock_plan(clk(1980), clk(1980), clk(1965), best_shift_pct=3 * 0.76)
    assert not p.spread_explained and p.reference == "both"


def test_one_clock_for_all_three_or_an_unknown_clock_is_the_plain_rule():
    plain = judge(FAST, 376.1, FAST)
    same = judge(FAST, 376.1, FAST, clocks=(clk(1980), clk(1980), clk(1980)))
    unknown = judge(FAST, 376.1, SLOW, clocks=(clk(1980), None, clk(1965)))
    assert same.gpu_delta_pct == plain.gpu_delta_pct and same.kept and same.clock.reference == "both"
    assert same.clock.penalty_pct == 0.0 and not same.clock.spread_explained and plain.clock is None
    assert "SM clock 1980 MHz, 1980 MHz, 1980 MHz" in same.reason  # a report line: the clocks are shown
    assert not unknown.kept and unknown.floor.binding == "own_spread"  # as without clocks


def test_a_candidate_at_a_third_clock_pays_the_ratio_to_the_higher_best_clock():
    p = clock_plan(clk(1965), clk(1995), clk(1980), best_shift_pct=-0.76)
    assert p.reference == "both" and p.penalty_pct == pytest.approx(100 * 0.0075472, abs=0.01)
    assert not p.spread_explained


def test_equal_launch_counts_in_one_attempt_do_not_make_a_time_driven_harness_fixed():
    # 2026-11-24: both BEST profiles of do_bench launched spin_kernel 254 times, the -2% candidate
    # 253 times, and the fixed-repetition rule called it skipped work. The session knew better:
    # earlier BEST profiles had launched it a different number of times.
    def launches(median_us, calls):
        return run(median_us, calls=calls)

    alone = judge_groups(launches(FAST, 254), launches(372.3, 253), launches(FAST, 254), "spin_kernel")
    assert not alone.kept and alone.code == Code.SKIPPED_WORK and not alone.time_driven
    known = judge_groups(launches(FAST, 254), launches(372.3, 253), launches(FAST, 254), "spin_kernel",
                         known_time_driven=True)
    assert known.kept and known.time_driven and known.code == Code.GPU_TIME_WIN, known.reason
    assert known.groups[0].best_calls == [254, 254]  # time-driven by the session's history, not by this attempt
    # a time-driven harness still calls a faster group with under half of BEST's launches skipped work
    cached = judge_groups(launches(FAST, 254), launches(372.3, 100), launches(FAST, 254), "spin_kernel",
                          known_time_driven=True)
    assert not cached.kept and cached.code == Code.SKIPPED_WORK and cached.time_driven


def test_a_candidate_whose_clock_moved_cannot_pick_its_best_profile():
    # the cheat: BEST steps 1980 -> 1965 MHz between its profiles; the candidate pads its run with a long
    # busy phase that throttles the GPU to 1965 MHz (its median clock) and runs the target kernels at 1980,
    # then asks to be compared with BEST's 1965 MHz profile
    padded = RunClock(sm_mhz=1965.0, min_mhz=1965.0, max_mhz=1980.0, busy_samples=200, steady_pct=80.0)
    d = judge(FAST, FAST, SLOW, clocks=(clk(1980), padded, clk(1965)))
    assert not d.kept and d.clock.reference == "both" and not d.clock.spread_explained
    assert d.floor.binding == "own_spread"


def test_a_candidate_whose_clock_moved_pays_for_its_highest_clock():
    # the same padding with BEST at 1965 MHz in both profiles: its median says 1965, its target ran at 1980
    padded = RunClock(sm_mhz=1965.0, min_mhz=1965.0, max_mhz=1980.0, busy_samples=200, steady_pct=80.0)
    d = judge(SLOW, FAST, SLOW, clocks=(clk(1965), padded, clk(1965)))
    assert not d.kept and d.clock.penalty_pct == pytest.approx(0.760, abs=0.001)
    # a run that only had ramp-up samples below its clock (the recorded 97% at 1980) pays nothing
    ramp = RunClock(sm_mhz=1980.0, min_mhz=345.0, max_mhz=1980.0, busy_samples=68, steady_pct=97.06)
    unsteady_ramp = ramp.model_copy(update={"steady_pct": 70.0})
    for c in (ramp, unsteady_ramp):
        d = judge(FAST, 376.1, FAST, clocks=(clk(1980), c, clk(1980)))
        assert d.kept and d.clock.penalty_pct == 0.0
