"""Behaviour kept through the split of `judge_groups` into predicates (issue 23): every input of the
launch-group keep metric in tests/rules (tests/rules/keep_groups_cases.py: the recorded H100 do_bench
processes, the recorded rocprofv3 and format-1 CUPTI traces, every replayed call of the rule's tests,
a sweep over the floor's edges) judged today gives the figures the code before the split gave
(tests/fixtures/keep_groups/before_split.json, captured from commit ec6c01c; how: its `note`), and
the `code` of each decision is the cause that code's reason named (`old_cause` in the fixture)."""

from __future__ import annotations

import json
import math

import pytest

from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.keep import judge_groups
from tests.rules.keep_groups_cases import CAPTURED, all_cases, figures

BEFORE = json.loads(CAPTURED.read_text())["cases"]
CASES = all_cases()
#: the code each cause the pre-split reason named must carry now (a gain that is not kept and not
#: significant: gpu_time_below_floor where it is > 0, as in rules/keep_totals.py and rules/units.py)
CODE_OF_OLD_CAUSE = {
    "kept": Code.GPU_TIME_WIN, "best_target_missing": Code.GPU_TIME_MISSING,
    "candidate_target_missing": Code.GPU_TIME_MISSING, "no_per_launch_times": Code.GPU_TIME_MISSING,
    "best_unreproducible": Code.GPU_TIME_UNREPRODUCIBLE, "best_group_missing": Code.SKIPPED_WORK,
    "too_few_launches": Code.SKIPPED_WORK, "significant_gain_below_floor": Code.GPU_TIME_BELOW_FLOOR,
}


def _same(now, then, where: str) -> None:
    """Equal, floats within 1e-9 relative (a sum taken in another order), recursively."""
    if isinstance(then, float) or isinstance(now, float):
        assert now is not None and then is not None, f"{where}: {now} != {then}"
        assert math.isclose(now, then, rel_tol=1e-9, abs_tol=1e-12), f"{where}: {now} != {then}"
    elif isinstance(then, dict):
        assert isinstance(now, dict) and set(now) == set(then), f"{where}: keys {sorted(now)} != {sorted(then)}"
        for k in then:
            _same(now[k], then[k], f"{where}.{k}")
    elif isinstance(then, list):
        assert isinstance(now, list) and len(now) == len(then), f"{where}: {now} != {then}"
        for i, (a, b) in enumerate(zip(now, then)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert now == then, f"{where}: {now!r} != {then!r}"


def test_every_case_was_captured():
    assert sorted(CASES) == sorted(BEFORE)
    assert len(CASES) >= 150


@pytest.mark.parametrize("name", sorted(CASES))
def test_figures_are_those_of_the_code_before_the_split(name, tmp_path):
    args, kwargs = CASES[name](tmp_path)
    d = judge_groups(*args, **kwargs)
    then = dict(BEFORE[name])
    cause = then.pop("old_cause")
    expected = CODE_OF_OLD_CAUSE.get(cause) or (
        Code.GPU_TIME_BELOW_FLOOR if then["gpu_delta_pct"] > 0 else Code.GPU_TIME_NOT_IMPROVED)
    credit = d.clock.credit_pct + d.clock.penalty_pct if d.clock else 0.0  # a clock's share is no loss
    if expected == Code.GPU_TIME_NOT_IMPROVED and d.gpu_delta_pct + credit < -d.floor.pct and \
            d.upper_bound_pct + credit < -kwargs.get("min_gain_pct", 0.2):
        expected = Code.GPU_TIME_LOSS  # the loss rule, added after the capture (2026-11-27): slower beyond the floor
    assert d.code == expected, (cause, d.reason)
    assert d.kept == then["kept"]
    _same(d.gpu_delta_pct, then["gpu_delta_pct"], "gpu_delta_pct")
    _same(None if d.floor is None else d.floor.model_dump(mode="json"), then["floor"], "floor")
    _same(figures(d), then, name)
