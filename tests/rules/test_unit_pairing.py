"""Units paired across runs whose unit counts differ (rules/unit_pairing.py, issue 34 item 5), on real
recorded units of Liger-Kernel's RMSNorm benchmark (tests/fixtures/cupti/h200_liger_units/SOURCE.md).

A harness kopt does not mark (or a recording from before markers) has its units found in the launch
stream, where one config's stretch can come out cut in two: here a recorded unit is cut at the middle
of its invocations, as such a run would be, and the verdict must be the one of the uncut runs."""

from __future__ import annotations

import pytest

from kopt_mcp.evidence.units import HarnessUnit
from kopt_mcp.rules.unit_pairing import pair_units
from kopt_mcp.rules.units import judge_units
from tests.rules.test_units_recorded import POLICY, RUNS, TARGET, _spreads


def _cut(units: list[HarnessUnit], k: int) -> list[HarnessUnit]:
    """`units` with unit k cut in two at the middle of its invocations (indices renumbered)."""
    u = units[k]
    invs = sorted({i for per in u.per_invocation.values() for i in per})
    mid = invs[len(invs) // 2]

    def part(keep, shift: int) -> HarnessUnit:
        return u.model_copy(update={
            "per_invocation": {n: {i - shift: v for i, v in per.items() if keep(i)} for n, per in u.per_invocation.items()},
            "launches": {n: {i - shift: v for i, v in per.items() if keep(i)} for n, per in u.launches.items()},
            "invocations": sum(1 for i in invs if keep(i))})

    pieces = [part(lambda i: i < mid, 0), part(lambda i: i >= mid, mid)]
    return [x.model_copy(update={"index": j}) for j, x in enumerate([*units[:k], *pieces, *units[k + 1:]])]


@pytest.mark.parametrize("attempt, outcome, code", [(5, "improved", "gpu_time_win"), (2, "regressed", "gpu_time_loss")])
def test_a_unit_cut_in_two_in_one_run_is_paired_and_judged_as_the_uncut_runs(attempt, outcome, code):
    b1, c, b2 = (RUNS[f"000{attempt}-{x}"] for x in ("best-1", "candidate-1", "best-2"))
    whole = judge_units(b1, c, b2, TARGET, POLICY, _spreads(attempt))
    k = next(i for i, u in enumerate(c) if any("_rms_norm_backward" in n for n in u.per_invocation))
    cut = _cut(c, k)
    assert len(cut) == len(c) + 1
    d = judge_units(b1, cut, b2, TARGET, POLICY, _spreads(attempt))
    assert (whole.outcome, whole.code) == (outcome, code)
    assert (d.outcome, d.code) == (outcome, code), d.reason
    assert d.gpu_delta_pct == pytest.approx(whole.gpu_delta_pct, abs=0.1)
    assert len(d.units) == len(whole.units)


def test_best_cut_in_another_place_is_paired_too():
    b1, c, b2 = (RUNS[f"0005-{x}"] for x in ("best-1", "candidate-1", "best-2"))
    k = next(i for i, u in enumerate(b1) if any("_rms_norm_backward" in n for n in u.per_invocation))
    paired = pair_units(_cut(b1, k), c, b2)
    assert paired is not None and [len(x) for x in paired] == [len(c)] * 3
    assert paired[0][k].invocations == b1[k].invocations  # merged back into the one config it was


def test_pieces_that_run_at_other_speeds_are_never_merged():
    """The forward unit at T=1024 cut at its middle: the halves' medians are 5.1 and 7.3 us (the recorded
    unit is not stationary), as far apart as two configs (T=2048 runs at 8.1 us): not merged, so the
    runs stay not comparable rather than pairing two configs."""
    b1, c, b2 = (RUNS[f"0005-{x}"] for x in ("best-1", "candidate-1", "best-2"))
    k = next(i for i, u in enumerate(b1) if any("_rms_norm_forward" in n for n in u.per_invocation))
    assert pair_units(_cut(b1, k), c, b2) is None


def test_runs_that_do_not_line_up_are_still_not_comparable():
    b1, c, b2 = (RUNS[f"0005-{x}"] for x in ("best-1", "candidate-1", "best-2"))
    d = judge_units(b1, c[:-3], b2, TARGET, POLICY, _spreads(5))
    assert (d.kept, d.code) == (False, "gpu_time_unreproducible")
