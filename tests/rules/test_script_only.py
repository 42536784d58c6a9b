"""rules/script_only.py: when a keep only the script metric decided may be committed (pure)."""

from __future__ import annotations

import pytest

from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.script_only import gpu_profiler_expected, script_only_commit, script_only_keeps_allowed


@pytest.mark.parametrize("vendor, backend, expected", [
    ("cpu", "auto", False), ("cpu", "none", False), ("nvidia", "none", False),
    ("nvidia", "auto", True), ("amd", "auto", True), ("nvidia", "cupti", True), ("cpu", "ncu", True)])
def test_a_gpu_profiler_is_expected_on_a_gpu_with_auto_or_wherever_one_is_named(vendor, backend, expected):
    assert gpu_profiler_expected(vendor, backend) is expected
    assert script_only_keeps_allowed(None, vendor, backend) is (not expected)  # the default follows


@pytest.mark.parametrize("setting", [True, False])
def test_the_human_setting_wins_both_ways(setting):
    for vendor, backend in (("cpu", "none"), ("nvidia", "auto")):
        assert script_only_keeps_allowed(setting, vendor, backend) is setting
        d = script_only_commit(setting, vendor, backend)
        assert (d is None) is setting
        if d is not None:
            assert d.code == Code.SCRIPT_ONLY and "allow_script_only_keeps = false" in d.reason
