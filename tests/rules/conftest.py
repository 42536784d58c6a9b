"""Shared helpers for the launch-group rule tests (test_keep_groups.py, test_pairing.py): two config
classes of the recorded H100 sgemm replayed as a do_bench-like harness (tests/replay_cupti.py)."""

from __future__ import annotations

import pytest

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
