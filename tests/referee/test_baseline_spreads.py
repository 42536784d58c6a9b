"""The baseline's spreads between adjacent profiles of BEST_COMMIT (referee/baseline.py
`_baseline_spreads`) where the traces carry neither harness units nor launch groups (ncu's
aggregate-only trace, or a CUPTI run whose units and groups cannot be compared): the spread falls
back to the target kernels' totals (us). Found on the H200 (2026-12-03): flash-linear-attention's
LayerNorm baseline stopped with a TypeError there, the fallback read the units' lists."""

from __future__ import annotations

import pytest

from kopt_mcp.evidence.trace import KernelStat, KernelTrace
from kopt_mcp.referee.baseline import _baseline_spreads


def _trace(total_us: float) -> KernelTrace:
    k = KernelStat(name="layer_norm_fwd_kernel1", calls=10, total_us=total_us, avg_us=total_us / 10,
                   share_pct=100.0)
    return KernelTrace(backend="ncu", kernels=[k], total_gpu_us=total_us)


def test_without_units_or_groups_the_spread_is_between_the_target_totals():
    spreads = _baseline_spreads([_trace(100.0), _trace(110.0), _trace(110.0)], [100.0, 110.0, 110.0],
                                "layer_norm")
    assert spreads == pytest.approx([100 * 10 / 105, 0.0])
