"""Which BEST profile a candidate is compared with when the SM clock stepped (pure).

The A/B/A keep metric (rules/keep.py) compares the candidate's median launch with the mean of
BEST's two profiles, and its floor is at least twice the spread between those profiles. That
floor is there for a level jump of the whole GPU between runs. On an H100 whose clocks nobody
locks, those jumps are SM clock steps (1980 <-> 1965 MHz, 0.76%; the 2026-11-24 do_bench runs,
kopt_mcp/gpus/clocks.py), and with each run's clock known (`RunClock`, sampled outside the
benchmark) a step no longer has to be treated as noise:

- **all three runs at one clock** (or a clock unknown): the A/B/A rule as it is.
- **BEST's profiles at two clocks, the candidate at one of them**: the candidate is compared with
  the BEST profile at its own clock, and BEST's spread stops counting in the floor, provided the
  clocks explain it: BEST's time moved against the clock (a higher clock, a shorter launch) by no
  more than CLOCK_EXPLAINS x the clock step, and the candidate's own clock held (STEADY_PCT of its
  busy samples at its median). Otherwise the spread is something else and the floor keeps twice it.
- **the candidate at a clock neither BEST profile had**: a kernel's time falls by at most the
  clock ratio when the clock rises (time ~ 1/clock when compute-bound, flat when memory-bound), so
  a candidate that ran at a higher clock than BEST's must beat BEST by that ratio as well
  (`penalty_pct`, 100 * ln(candidate clock / BEST clock)); at a lower clock it is judged as
  measured, which can only cost it. This closes a false keep the plain rule allowed: both BEST
  profiles at 1965 MHz and an unchanged candidate at 1980 MHz measure a 0.76% "gain" with a spread
  of 0, above the 0.2% floor. A candidate whose own clock moved (under STEADY_PCT of its busy
  samples at its median) is charged for the highest clock it ran at.

Clocks are the same when within SAME_CLOCK_PCT (a step of an H100 is 15 MHz, 0.76%).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel

from kopt_mcp.evidence.clock import RunClock

#: two runs' clocks (%) closer than this are one clock level
SAME_CLOCK_PCT = 0.25
#: BEST's spread is the clock step when it is at most this many times the step (time ~ 1/clock at most)
CLOCK_EXPLAINS = 1.25
#: a spread this small (%) is no evidence against the clocks, whichever way it went
NEGLIGIBLE_SPREAD_PCT = 0.05
#: a candidate run is matched to one BEST profile only when this share (%) of its busy samples sat at
#: its median clock: a run whose clock moved (e.g. a long busy phase that throttles the GPU, then the
#: target kernels at a higher clock) cannot choose its reference
STEADY_PCT = 90.0


class ClockPlan(BaseModel):
    """How the keep metric uses the runs' clocks: `reference` ("both": the mean of BEST's two
    profiles; "before"/"after": that one profile), `penalty_pct` (subtracted from the gain and
    its lower bound), `credit_pct` (added to a loss before it counts as `regressed`: the candidate
    ran at a lower clock than both BEST profiles, so an unchanged kernel is that much slower),
    `spread_explained` (BEST's spread is the clock step: not counted in the
    floor, not added to the session's spreads) and `note` for the verdict's reason ("" when the
    clocks change nothing)."""

    reference: Literal["both", "before", "after"] = "both"
    penalty_pct: float = 0.0
    credit_pct: float = 0.0
    spread_explained: bool = False
    note: str = ""


def _gap_pct(a: float, b: float) -> float:
    return 100.0 * math.log(a / b)


def same_clock(a: RunClock | None, b: RunClock | None) -> bool:
    """True unless both clocks are known and more than SAME_CLOCK_PCT apart."""
    return a is None or b is None or abs(_gap_pct(a.sm_mhz, b.sm_mhz)) <= SAME_CLOCK_PCT


def clock_plan(before: RunClock | None, candidate: RunClock | None, after: RunClock | None,
               best_shift_pct: float) -> ClockPlan:
    """The ClockPlan for BEST's profile `before`, the candidate's, and BEST's `after` (their
    RunClocks; None: unknown), given `best_shift_pct`, BEST's signed change between its profiles
    in GPU time (%, + = the `after` profile's launches took longer). Never raises."""
    if before is None or candidate is None or after is None:
        return ClockPlan()
    f1, fc, f2 = before.sm_mhz, candidate.sm_mhz, after.sm_mhz
    shown = f"SM clock {before.shown()}, {candidate.shown()}, {after.shown()} (BEST, candidate, BEST)"
    same_1, same_2 = same_clock(candidate, before), same_clock(candidate, after)
    best_step = _gap_pct(f2, f1)  # + = the after profile ran at a higher clock
    # a candidate whose clock moved is charged for the highest clock it ran at, not its median
    top = fc if candidate.steady_pct >= STEADY_PCT else max(fc, candidate.max_mhz)
    if same_clock(before, after):
        rise = _gap_pct(top, math.sqrt(f1 * f2))
        if same_1 and same_2 and rise <= SAME_CLOCK_PCT:
            return ClockPlan(note=shown)
        if rise > 0:
            return ClockPlan(penalty_pct=rise, note=(
                f"{shown}: the candidate ran at a {rise:.2f}% higher clock than both BEST profiles, so its gain "
                f"must exceed that as well (a kernel's time falls by at most the clock ratio)"))
        return ClockPlan(credit_pct=-rise, note=(
            f"{shown}: the candidate ran at a {-rise:.2f}% lower clock: a win is judged as measured, a loss "
            "only beyond that"))
    # BEST's profiles at two clocks: time ~ clock^-a with 0 <= a <= CLOCK_EXPLAINS explains the spread
    explained = (abs(best_shift_pct) <= NEGLIGIBLE_SPREAD_PCT or
                 (best_shift_pct * best_step < 0 and abs(best_shift_pct) <= CLOCK_EXPLAINS * abs(best_step)))
    if same_1 != same_2 and explained and candidate.steady_pct >= STEADY_PCT:
        ref = "before" if same_1 else "after"
        return ClockPlan(reference=ref, spread_explained=True, note=(
            f"{shown}: BEST's {abs(best_shift_pct):.3f}% spread is its clock step, so the candidate is compared with "
            f"BEST's profile at its own clock (the one {ref} it)"))
    why = "" if explained else f" (BEST's {best_shift_pct:+.3f}% is not what its clock step explains)"
    rise = _gap_pct(top, max(f1, f2))
    if rise > SAME_CLOCK_PCT:
        return ClockPlan(penalty_pct=rise, note=(
            f"{shown}: the candidate ran at a {rise:.2f}% higher clock than either BEST profile, so its gain must "
            f"exceed that as well{why}"))
    return ClockPlan(note=f"{shown}{why}")


__all__ = ["CLOCK_EXPLAINS", "ClockPlan", "NEGLIGIBLE_SPREAD_PCT", "SAME_CLOCK_PCT", "STEADY_PCT", "clock_plan",
           "same_clock"]
