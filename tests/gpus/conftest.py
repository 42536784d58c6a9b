"""Shared helpers for the GPU tests: replay of recorded nvidia-smi output, a fake clock."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kopt_mcp.testing.toy import FakeClock

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"

# (query-gpu output, query-compute-apps output) recorded together on one machine
IDLE = ("h200_query_gpu_header.csv", "h200_query_compute_apps_idle.csv")
BUSY = ("h200_busy_query_gpu_header.csv", "h200_busy_query_compute_apps.csv")
X8 = ("h200x8_query_gpu_index_uuid_mem_util_before.csv", "h200x8_query_compute_apps_before.csv")


def child_env() -> dict[str, str]:
    """Environment for a child Python that must import kopt_mcp (repo root first on PYTHONPATH)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def fixture_text(name: str) -> str:
    """The recorded output stored in tests/fixtures/nvidia_smi/<name>."""
    return (FIXTURES / name).read_text()


class SmiReplay:
    """A `run` for NvidiaSmiProbe: answers poll n with the n-th recorded pair (the last repeats)."""

    def __init__(self, *polls: tuple[str, str]) -> None:
        self.polls = list(polls)
        self.calls: list[list[str]] = []
        self.poll = 0

    def __call__(self, args: list[str]) -> str:
        self.calls.append(list(args))
        gpu, apps = self.polls[min(self.poll, len(self.polls) - 1)]
        if args[1].startswith("--query-gpu="):
            return fixture_text(gpu)
        if args[1].startswith("--query-compute-apps="):
            self.poll += 1
            return fixture_text(apps)
        raise AssertionError(f"unexpected command {args}")


@pytest.fixture
def fake_time() -> FakeClock:
    return FakeClock()
