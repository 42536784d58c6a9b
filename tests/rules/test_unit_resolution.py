"""A unit's loss below the GPU timer's resolution is not a trade-off (rules/units.py RESOLUTION_TICKS).

Found on one H200 (2026-12-02, Liger RMSNorm's own benchmark, issue 38's honest run): the real win (backward
at 16 warps, target +1.615%) was called `divergent` because the untouched forward kernel's unit at T=2048 read
8.128 -> 8.192 us against BEST's 8.128 / 8.096: two steps of CUPTI's 32-ns timer (-0.98% against a unit floor of
0.777%). Evidence here: the REAL recorded units of the same benchmark on an H200
(tests/fixtures/cupti/h200_liger_units), attempt 5 (the same candidate: backward at 16 warps, improved there), with the forward unit's candidate times moved
by whole timer steps (the stand-in for today's drift) or by 10% (a real loss there)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from kopt_mcp.evidence.units import HarnessUnit
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.unit_figures import figures, timer_tick_us
from kopt_mcp.rules.units import RESOLUTION_TICKS, judge_units, unit_spread_pct

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cupti" / "h200_liger_units" / "units.json.gz"
TARGET = "_rms_norm_(forward|backward)_kernel"
RAW = json.loads(gzip.decompress(FIXTURE.read_bytes()))
FORWARD_2048 = 5  # the unit of kernel_operation_mode=forward, T=2048: one ~8-us forward launch per invocation


def _units(run: str, shift_us: float = 0.0, scale: float = 1.0) -> list[HarnessUnit]:
    units = [HarnessUnit.model_validate(u) for u in RAW[run]]
    per = units[FORWARD_2048].per_invocation["_rms_norm_forward_kernel"]
    for i, v in per.items():
        per[i] = v * scale + shift_us
    return units


def _judge(shift_us: float = 0.0, scale: float = 1.0):
    base = ["0000-baseline-profile", "0000-baseline-profile-2", "0000-baseline-profile-3", "0000-baseline-profile-4"]
    spreads = [unit_spread_pct(_units(a), _units(b), TARGET) for a, b in zip(base, base[1:])]
    spreads += [unit_spread_pct(_units(f"000{n}-best-1"), _units(f"000{n}-best-2"), TARGET) for n in (1, 2, 3)]
    return judge_units(_units("0005-best-1"), _units("0005-candidate-1", shift_us, scale), _units("0005-best-2"),
                       TARGET, Policy(noise_pct=1.0), spreads)


def test_cuptis_kernel_times_on_an_h200_sit_on_a_32_ns_lattice():
    import re
    rx = re.compile(TARGET)
    ticks = [figures(u, rx).tick_us for u in _units("0001-best-1") if figures(u, rx).target_us]
    assert len(ticks) == 12 and all(t == pytest.approx(0.032, abs=0.0005) for t in ticks)
    assert timer_tick_us([5.0 + 0.0137 * i ** 1.5 for i in range(200)]) == 0.0  # times not on a lattice
    assert timer_tick_us([5.12, 5.152, 5.184, 5.12, 5.152]) == 0.0  # under MIN_VALUES: too few to say


def test_the_step_is_found_through_rounding_jitter_and_a_common_offset():
    lattice = [0.032 * (150 + (7 * i) % 90) for i in range(400)]  # 4.8 .. 7.65 us, every step present
    jitter = [v + ((i * 37) % 7 - 3) / 1000 for i, v in enumerate(lattice)]  # -3 .. +3 ns
    shifted = [v + 0.0173 for v in lattice]  # launches between invocations spread over them all
    assert [timer_tick_us(x) for x in (lattice, jitter, shifted)] == [0.032, 0.032, 0.032]
    # continuous times (a CPU timer, or many kernels summed) have no step: the unit rule is as before there
    assert timer_tick_us([8.0 + 0.05 * math.sin(i * 1.7) + 0.0003 * i for i in range(300)]) == 0.0


@pytest.mark.parametrize("steps", [1, 2, 3])
def test_a_win_stays_improved_when_an_untouched_unit_drifts_by_a_few_timer_steps(steps):
    d = _judge(shift_us=steps * 0.032)
    forward = next(u for u in d.units if u.unit == FORWARD_2048)
    # the drift is there, beyond the unit's percentage floor (BEST read 8.128 us before and after, so 0.312%)
    assert forward.op_gain_pct == pytest.approx(-0.394 * steps, abs=0.01) and forward.op_gain_pct < -forward.op_floor_pct
    assert (d.outcome, d.code) == ("improved", "gpu_time_win") and not forward.op_significant_loss


def test_a_real_loss_in_one_unit_still_makes_the_win_divergent():
    d = _judge(scale=1.10)  # the forward unit 10% slower: about 25 timer steps
    forward = next(u for u in d.units if u.unit == FORWARD_2048)
    assert forward.op_significant_loss and forward.op_gain_pct == pytest.approx(-10.0, abs=1.0)
    assert (d.outcome, d.code) == ("divergent", "operation_divergent")
    assert (forward.op_candidate_us - (forward.op_best_before_us + forward.op_best_after_us) / 2) > RESOLUTION_TICKS * 0.032
