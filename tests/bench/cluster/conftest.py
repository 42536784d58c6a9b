"""Shared pieces of the cluster tests: the toy repository's trees and the per-node fake probe."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from kopt_mcp import vcs
from kopt_mcp.bench.cluster.testing import NodeSwitchProbe
from kopt_mcp.config import load_config
from kopt_mcp.testing.toy import make_toy_repo, set_kernel
from tests.conftest import FIXTURES

SMI = FIXTURES / "nvidia_smi"
BASE_TIMES = {"1": 100.0, "2": 200.0}
#: a candidate that rewrites the protected harness while it runs (what the node must report)
TAMPER = 'import pathlib\npathlib.Path("bench.py").write_text(pathlib.Path("bench.py").read_text() + "# tampered\\n")\n'


def replay(gpu: str, apps: str) -> dict[str, str]:
    """Recorded nvidia-smi output for NvidiaSmiProbe, by flag."""
    return {"--query-gpu": (SMI / gpu).read_text(), "--query-compute-apps": (SMI / apps).read_text()}


def switch_probe(switch_dir: Path) -> NodeSwitchProbe:
    """Idle: a recorded idle H200; busy: a recorded H200 at 99% with a foreign process."""
    return NodeSwitchProbe(idle=replay("h200_query_gpu_header.csv", "h200_query_compute_apps_idle.csv"),
                           busy=replay("h200_busy_query_gpu_header.csv", "h200_busy_query_compute_apps.csv"),
                           switch_dir=str(switch_dir))


class Toy:
    """The toy repository with BEST's tree and candidate trees made on demand."""

    def __init__(self, root: Path) -> None:
        self.path = make_toy_repo(root / "repo", BASE_TIMES)
        self.ws = git.Repo(self.path)
        self.cfg = load_config(self.path / "kopt.toml").target
        self.best = vcs.tree_of(self.ws, "HEAD")

    def candidate(self, times: dict[str, float], extra: str = "", **flags: object) -> str:
        """The tree of HEAD with kernel.py declaring `times` (plus source `extra`); the file is restored."""
        set_kernel(self.path, times, **flags)
        if extra:
            with (self.path / "kernel.py").open("a") as f:
                f.write(extra)
        tree = vcs.snapshot_tree(self.ws)
        self.ws.git.checkout("--", "kernel.py")
        return tree


@pytest.fixture
def toy(tmp_path) -> Toy:
    return Toy(tmp_path)
