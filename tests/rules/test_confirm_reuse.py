"""BEST's out-of-process measurement without a run (rules/confirm.py reusable_best): the last confirmed
commit's candidate run stands for BEST at the next confirmation, only for that very tree, target
selection and device, and only while recent (issue 34 item 6: a commit <= 1.5x one plain run)."""

from __future__ import annotations

import pytest

from kopt_mcp.evidence.confirm import StoredTargetTime, TargetTime
from kopt_mcp.rules.confirm import BEST_REUSE_MAX_AGE_S, reusable_best

T = TargetTime(us=6909.14, launches=360, groups=["softmax_kernel"], kernels=["softmax_kernel"], units={1: 460.6})
STORED = StoredTargetTime(tree="a1b2", commit="c0ffee", selection='["ncu", true]', device="nvidia:0:GPU-1", at=1000.0, time=T)


def test_the_same_tree_selection_and_device_within_the_age_reuse_the_measurement():
    got = reusable_best(STORED, "c0ffee", '["ncu", true]', "nvidia:0:GPU-1", now=1000.0 + BEST_REUSE_MAX_AGE_S)
    assert got is not None and got.us == 6909.14 and got.units == {1: 460.6}


@pytest.mark.parametrize("tree, selection, device, now", [
    ("ffff", '["ncu", true]', "nvidia:0:GPU-1", 1010.0),        # BEST is another tree
    ("c0ffee", '["ncu", false]', "nvidia:0:GPU-1", 1010.0),       # measured by launch configuration
    ("c0ffee", '["ncu", true]', "nvidia:1:GPU-2", 1010.0),        # another GPU
    ("c0ffee", '["ncu", true]', "nvidia:0:GPU-1", 1000.0 + BEST_REUSE_MAX_AGE_S + 1),  # too old
    ("c0ffee", '["ncu", true]', "nvidia:0:GPU-1", 999.0),         # a clock that went back
])
def test_anything_else_runs_best_again(tree, selection, device, now):
    assert reusable_best(STORED, tree, selection, device, now) is None


def test_nothing_stored_runs_best():
    assert reusable_best(None, "c0ffee", '["ncu", true]', "nvidia:0:GPU-1", 1000.0) is None
