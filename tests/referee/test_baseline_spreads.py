"""The baseline's spreads between adjacent profiles of BEST_COMMIT (referee/baseline.py
`_baseline_spreads`) where harness units do not decide them. Traces with neither harness units nor
launch groups (an aggregate-only trace): the spread of the target kernels' totals (us); on the H200
(2026-12-03) flash-linear-attention's LayerNorm baseline stopped with a TypeError there (the fallback
read the units' lists). A pair whose launch groups differ (one process launched configs the other did
not, as an uncached autotuner does) is left out: its difference is that work, not noise. The real
autotuning pair: tests/profilers/test_cupti_autotuner_units.py."""

from __future__ import annotations

import pytest

from kopt_mcp.evidence.groups import LaunchGroup
from kopt_mcp.evidence.trace import KernelStat, KernelTrace
from kopt_mcp.referee.baseline import _baseline_spreads

KERNEL = "layer_norm_fwd_kernel1"


def _trace(total_us: float, blocks: list[int] | None = None) -> KernelTrace:
    k = KernelStat(name=KERNEL, calls=10, total_us=total_us, avg_us=total_us / 10, share_pct=100.0)
    groups = None if blocks is None else [
        LaunchGroup(kernel=KERNEL, grid=(2048, 1, 1), block=(b, 1, 1), calls=10, total_us=total_us / len(blocks),
                    median_us=total_us / len(blocks) / 10) for b in blocks]
    return KernelTrace(backend="ncu" if blocks is None else "cupti", kernels=[k], total_gpu_us=total_us,
                       groups=groups)


def test_without_units_or_groups_the_spread_is_between_the_target_totals():
    spreads = _baseline_spreads([_trace(100.0), _trace(110.0), _trace(110.0)], [100.0, 110.0, 110.0], KERNEL)
    assert spreads == pytest.approx([100 * 10 / 105, 0.0])


def test_a_pair_that_launched_other_target_groups_is_left_out():
    traces = [_trace(400.0, [64, 128, 256, 512]), _trace(300.0, [128]), _trace(303.0, [128])]
    spreads = _baseline_spreads(traces, [400.0, 300.0, 303.0], KERNEL)
    assert spreads == pytest.approx([100 * 3 / 301.5])  # the second pair only, by launch group
