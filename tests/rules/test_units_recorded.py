"""The keep metric by harness unit (rules/units.py) on real recorded units of Liger-Kernel's own
RMSNorm benchmark on an H200 (tests/fixtures/cupti/h200_liger_units/SOURCE.md): today's rule gives
the verdicts, gains and floors the session gave on the device, and its floor stays under 2% where
the launch-group rule's was 53-129% on the same benchmark."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kopt_mcp.evidence.units import HarnessUnit
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.units import judge_units, unit_spread_pct

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cupti" / "h200_liger_units" / "units.json.gz"
TARGET = "_rms_norm_(forward|backward)_kernel"
RUNS = {k: [HarnessUnit.model_validate(u) for u in v] for k, v in json.loads(gzip.decompress(FIXTURE.read_bytes())).items()}
POLICY = Policy(noise_pct=1.0)


def _spreads(upto: int) -> list[float]:
    """The session's A/A spreads before attempt `upto`: the baseline's adjacent profiles, then each
    earlier attempt's BEST before and after the candidate."""
    base = ["0000-baseline-profile", "0000-baseline-profile-2", "0000-baseline-profile-3", "0000-baseline-profile-4"]
    out = [unit_spread_pct(RUNS[a], RUNS[b], TARGET) for a, b in zip(base, base[1:])]
    out += [unit_spread_pct(RUNS[f"000{n}-best-1"], RUNS[f"000{n}-best-2"], TARGET) for n in (1, 2, 3, 5) if n < upto]
    return out


@pytest.mark.parametrize("attempt, outcome, code, gain, floor", [
    (1, "tie", "gpu_time_below_floor", 0.090, 0.431),
    (2, "regressed", "gpu_time_loss", -29.947, 0.312),
    (3, "improved", "gpu_time_win", 1.681, 0.431),
    (5, "improved", "gpu_time_win", 1.367, 0.312),
])
def test_recorded_liger_attempts_are_judged_as_on_the_device(attempt, outcome, code, gain, floor):
    d = judge_units(RUNS[f"000{attempt}-best-1"], RUNS[f"000{attempt}-candidate-1"], RUNS[f"000{attempt}-best-2"],
                    TARGET, POLICY, _spreads(attempt))
    assert (d.outcome, d.code) == (outcome, code)
    assert d.gpu_delta_pct == pytest.approx(gain, abs=0.01)
    assert d.floor.pct == pytest.approx(floor, abs=0.002)


def test_twelve_config_units_are_judged_and_every_floor_is_under_two_percent():
    d = judge_units(RUNS["0001-best-1"], RUNS["0001-candidate-1"], RUNS["0001-best-2"], TARGET, POLICY, _spreads(1))
    assert len(d.units) == 12  # forward, backward and full, at four sequence lengths
    assert max(_spreads(6)) < 0.4 and d.floor.pct < 2.0
    # backward units hold the whole operation's kernels: the persistent kernel, torch's dW sum, the grad add
    assert all(u.candidate_us > 0 for u in d.units)


MOVED = {k: [HarnessUnit.model_validate(u) for u in v] for k, v in json.loads(gzip.decompress(
    (FIXTURE.parents[1] / "h200x4_liger_moved_work" / "units.json.gz").read_bytes())).items()}


def test_a_target_saving_that_the_operations_other_kernels_take_back_in_some_classes_is_divergent():
    """Liger's backward at 4 programs per SM (4 x H200): its kernel 18.4% faster, the whole step 1.6%, but
    torch's sum over the 4x larger dW partial buffer grew: per config class the whole operation of the
    small-T backward and full units got slower beyond their floor (issue 34 item 3: a trade-off between
    classes, never `improved`), faster for the large-T ones."""
    base = ["0000-baseline-profile", "0000-baseline-profile-2", "0000-baseline-profile-3", "0000-baseline-profile-4"]
    spreads = [unit_spread_pct(MOVED[a], MOVED[b], TARGET) for a, b in zip(base, base[1:])]
    spreads.append(unit_spread_pct(MOVED["0001-best-1"], MOVED["0001-best-2"], TARGET))
    d = judge_units(MOVED["0002-best-1"], MOVED["0002-candidate-1"], MOVED["0002-best-2"], TARGET, POLICY, spreads)
    assert (d.outcome, d.code, d.kept) == ("divergent", "operation_divergent", False)
    assert d.gpu_delta_pct == pytest.approx(18.395, abs=0.01) and d.op_delta_pct == pytest.approx(1.612, abs=0.01)
    assert d.floor.pct == pytest.approx(1.832, abs=0.002)
    by = {u.unit: u for u in d.units}
    # the four small-T backward / full units, named by the harness's order (no classes given here)
    assert [u.unit for u in d.units if u.op_significant_loss] == [12, 13, 20, 21]
    assert by[12].op_gain_pct == pytest.approx(-24.18, abs=0.01) and by[20].op_gain_pct == pytest.approx(-24.78, abs=0.01)
    assert by[15].op_gain_pct == pytest.approx(7.99, abs=0.01) and not by[15].op_significant_loss
    assert all(by[k].gain_pct > 4.0 for k in (12, 13, 20, 21))  # the target kernels themselves got faster there
    assert d.divergent_classes == [by[k].cls for k in (12, 13, 20, 21)]
    assert "reduce_kernel" in d.grew and "sum_functor" in d.grew
