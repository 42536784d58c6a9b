"""The pure parts of the Liger decision-quality driver (benchmarks/real_repos/liger_dq.py): planting
work in the forward kernel's source, sizing an effect from the calibration, and the targets table.
The GPU run itself is recorded under benchmarks/results/ when it has run."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REAL = Path(__file__).resolve().parents[2] / "benchmarks" / "real_repos"


def _load():
    """liger_dq.py with its sibling modules (`run`, `projects`) on the path only while it loads: other
    tests import a `run` module of benchmarks/decision_quality under the same name."""
    saved = {k: sys.modules.pop(k, None) for k in ("run", "projects")}
    sys.path.insert(0, str(REAL))
    try:
        spec = importlib.util.spec_from_file_location("liger_dq_under_test", REAL / "liger_dq.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(REAL))
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


_dq = _load()
GLOBAL_ANCHOR, KERNEL_ANCHOR, calibrate, effect_work, plant, set_work, summary = (
    _dq.GLOBAL_ANCHOR, _dq.KERNEL_ANCHOR, _dq.calibrate, _dq.effect_work, _dq.plant, _dq.set_work, _dq.summary)

# the two lines of Liger's ops/rms_norm.py (ead96b6) the planting anchors on, with a line around each
SOURCE = ("_CASTING_MODE_LLAMA: tl.constexpr = tl.constexpr(0)\n" + GLOBAL_ANCHOR + "\n\n@triton.jit\n"
          "def _rms_norm_forward_kernel(Y_ptr, ...):\n    row_idx = tl.program_id(0).to(tl.int64)\n"
          + KERNEL_ANCHOR + "\n    X_row = tl.load(x_base + col_offsets, mask=mask, other=0)\n")


def test_the_planted_constant_sets_the_loop_and_only_the_constant_changes_between_candidates():
    p = plant(SOURCE, 2048)
    assert "_KOPT_DQ_WORK: tl.constexpr = tl.constexpr(2048)\n" in p and "for _ in range(_KOPT_DQ_WORK):" in p
    assert p.index("_KOPT_DQ_WORK: tl.constexpr") > p.index(GLOBAL_ANCHOR)
    assert p.index("for _ in range") > p.index(KERNEL_ANCHOR)
    q = set_work(p, 2100)
    diff = [(x, y) for x, y in zip(p.splitlines(), q.splitlines()) if x != y]
    assert diff == [("_KOPT_DQ_WORK: tl.constexpr = tl.constexpr(2048)", "_KOPT_DQ_WORK: tl.constexpr = tl.constexpr(2100)")]


def test_another_liger_version_without_the_anchors_is_refused():
    with pytest.raises(ValueError, match="anchor found 0 times"):
        plant(SOURCE.replace(KERNEL_ANCHOR, ""), 10)
    with pytest.raises(ValueError, match="not planted"):
        set_work(SOURCE, 10)


def test_effects_are_sized_on_the_calibrated_slope():
    # BEST 500 us with 2048 units planted; 2 x 2048 measured 560 us: 60 us per 2048 units
    cal = calibrate(2048, 500.0, 560.0)
    assert cal["slope_us"] == pytest.approx(60.0 / 2048) and cal["share"] == pytest.approx(0.12)
    assert effect_work(2048, 0.0, 500.0, cal["slope_us"]) == 2048
    assert effect_work(2048, -5.0, 500.0, cal["slope_us"]) == round(2048 - 25.0 / (60.0 / 2048))  # 25 us less
    assert effect_work(2048, 1.0, 500.0, cal["slope_us"]) == round(2048 + 5.0 / (60.0 / 2048))
    with pytest.raises(ValueError, match="too small"):
        effect_work(100, -5.0, 500.0, cal["slope_us"])
    with pytest.raises(ValueError, match="no GPU time per unit"):
        effect_work(2048, 1.0, 500.0, 0.0)
    # the W0 that would make 15% of BEST: plain 440 us -> 15% of the total is 77.6 us of planted work
    assert cal["retarget_w0"] * cal["slope_us"] == pytest.approx(0.15 / 0.85 * 440.0, rel=0.01)


def test_targets_count_kept_or_regressed_per_effect():
    rows = {"identical": [{"verdict": "tie"}] * 20, "+1%": [{"verdict": "regressed"}] * 19 + [{"verdict": "improved"}],
            "-2%": [{"verdict": "improved"}] * 18 + [{"verdict": "tie"}] * 2,
            "-5%": [{"verdict": "improved"}] * 18 + [{"verdict": "tie"}] * 2, "+5%": [{"verdict": "regressed"}] * 20}
    s = summary(rows)
    assert {k: v["met"] for k, v in s.items()} == {"identical": True, "+1%": False, "-2%": True, "-5%": False,
                                                    "+5%": True}
    assert s["-2%"]["kept"] == 18 and s["+5%"]["regressed"] == 20
    assert summary({"identical": []})["identical"]["met"] is None
