"""Shared fixtures: a toy kernel repository with exact metrics and a Referee on it."""

from __future__ import annotations

import shutil
from pathlib import Path

import mcp.client.stdio  # noqa: F401  -- see below
import pytest

from kopt_mcp.referee import Referee
from kopt_mcp.testing.toy import make_toy_repo

# mcp.client.stdio binds `errlog=sys.stderr` as a default argument when it is first imported. Imported
# here, before any test runs, that is pytest's session-wide stderr (a real file). Imported first inside
# a test that captures with capsys, it would be that test's in-memory stream, and every later stdio
# client in the run fails with "io.UnsupportedOperation: fileno".

FIXTURES = Path(__file__).parent / "fixtures"
BASE_TIMES = {"1": 100.0, "2": 200.0}


@pytest.fixture
def lease_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "leases"
    monkeypatch.setenv("KOPT_LEASE_DIR", str(d))
    return d


@pytest.fixture
def toy_repo(tmp_path) -> Path:
    return make_toy_repo(tmp_path / "repo", BASE_TIMES)


@pytest.fixture
def make_referee(lease_dir):
    made = []

    def make(repo: Path, tag: str = "t", **kw) -> Referee:
        r = Referee(repo, tag=tag, lease_dir=lease_dir, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def ref(toy_repo, make_referee) -> Referee:
    """A Referee whose baseline (n=1: 100 us, n=2: 200 us) is recorded."""
    r = make_referee(toy_repo)
    r.run_benchmark()
    return r


def npm_available() -> bool:
    return shutil.which("npx") is not None


def _gpu_present() -> bool:
    from kopt_mcp.gpus.nvml import NvmlProbe

    return NvmlProbe.available()


def pytest_collection_modifyitems(config, items):
    """Skip `gpu`-marked tests where no NVIDIA GPU answers NVML."""
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if gpu_items and not _gpu_present():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run scripts/gpu_suite.sh on one)")
        for item in gpu_items:
            item.add_marker(skip)
