"""Shared helpers for the launch-group rule tests (test_keep_groups.py, test_pairing.py,
test_clocks.py, keep_groups_cases.py): two config classes of the recorded H100 sgemm replayed as a
do_bench-like harness (tests/replay_cupti.py), FlagGems' and triton-kernels' launch shapes, and
spin_kernel's launches at the recorded H100 clock levels."""

from __future__ import annotations

import pytest

from kopt_mcp.evidence.clock import RunClock
from kopt_mcp.evidence.groups import LaunchGroup
from tests.replay_cupti import dobench_trace

SMALL, LARGE = (128, 1, 1), (512, 1, 1)


def configs(small=1.0, large=1.0, calls=((200, 380), (50, 95)), **extra):
    """Two config classes of the recorded sgemm: a small and a 4x larger launch, per-launch time
    scaled by `small`/`large` (0.98 = 2% faster), do_bench-like launch-count ranges."""
    return [dict(grid=SMALL, scale=1.0 * small, calls=calls[0], **extra),
            dict(grid=LARGE, scale=4.0 * large, calls=calls[1], **extra)]


@pytest.fixture
def runs(tmp_path):
    counter = iter(range(10_000))

    def run(cfg, shift_pct=0.0, **kw):
        n = next(counter)
        return dobench_trace(tmp_path / f"run{n}", seed=n, configs=cfg, shift_pct=shift_pct, **kw)
    return run


def flaggems_like(long_scale=1.0, long_block=None):
    """FlagGems' rms_norm on the H100 (2026-11-24, benchmarks/results/2026-11-24-h100-real-repos.md):
    the harness visits its shapes one after another; 1024x1024 and 1024x65536 rows both launch grid
    1024 with one block size, the first many times (short, time-driven), the second few times (long).
    The candidate gives the long rows another block (num_warps) and runs them 4x faster."""
    long = dict(grid=(1024, 1, 1), scale=40.0 * long_scale, calls=(20, 40))
    if long_block:
        long["block"] = long_block
    return [dict(grid=SMALL, scale=1.0, calls=(200, 380)),
            dict(grid=(1024, 1, 1), scale=1.0, calls=(3000, 5000)),
            dict(grid=LARGE, scale=4.0, calls=(50, 95)),
            long]


def bwd_groups(seq_lens, rows_per_program, scale, calls=300) -> list[LaunchGroup]:
    """triton-kernels' RMSNorm backward on the H100 benchmark's shapes: 96 * seq_len rows, one
    program per `rows_per_program` rows, 128 threads; median launch `scale` x seq_len / 10 us."""
    out = []
    for i, s in enumerate(seq_lens):
        med = scale * s / 10.0
        d = [med * (1 + 0.001 * (k % 5 - 2)) for k in range(calls)]
        out.append(LaunchGroup(kernel="_rms_norm_bwd", grid=(96 * s // rows_per_program, 1, 1), block=(128, 1, 1),
                               calls=calls, total_us=sum(d), median_us=med, first_order=float(i), durations_us=d))
    return out


def clk(mhz: float) -> RunClock:
    """A run that held one SM clock all along."""
    return RunClock(sm_mhz=mhz, min_mhz=mhz, max_mhz=mhz, busy_samples=200, steady_pct=100.0)


def spin_run(median_us: float, calls: int = 260) -> list[LaunchGroup]:
    """spin_kernel's one launch group, its launches 0.02 us around `median_us` (the 2026-11-24 H100
    do_bench runs: 379.9 us at 1980 MHz, 382.8 us at 1965 MHz)."""
    d = [median_us + (i % 3 - 1) * 0.02 for i in range(calls)]
    return [LaunchGroup(kernel="spin_kernel", grid=(132, 1, 1), block=(128, 1, 1), calls=calls,
                        total_us=sum(d), median_us=median_us, first_order=0.0, durations_us=d)]
