"""A fake GPU probe for Ray nodes in tests: each node replays recorded `nvidia-smi` output, busy or
idle as a switch file says, so a test can make one node's GPU busy while a job looks for one.

Nodes are told apart by the environment variable `KOPT_FAKE_NODE` of their processes (a test sets
it per node, e.g. `Cluster.add_node(env_vars={"KOPT_FAKE_NODE": "a"})`); `<switch_dir>/<node>.busy`
existing makes that node's GPU busy.
"""

from __future__ import annotations

import os
from pathlib import Path

from kopt_mcp.gpus.smi import NvidiaSmiProbe

NODE_ENV = "KOPT_FAKE_NODE"


class NodeSwitchProbe:
    """A picklable probe factory: `probe()` -> NvidiaSmiProbe replaying `busy` or `idle`.

    `idle` / `busy`: {nvidia-smi flag prefix ("--query-gpu", "--query-compute-apps"): recorded
    output}; `switch_dir`: where `<node>.busy` files are looked for (a folder all nodes see)."""

    def __init__(self, idle: dict[str, str], busy: dict[str, str], switch_dir: str) -> None:
        self.idle, self.busy, self.switch_dir = idle, busy, switch_dir

    def node(self) -> str:
        """This process's node name ($KOPT_FAKE_NODE, "" when unset)."""
        return os.environ.get(NODE_ENV, "")

    def set_busy(self, node: str, busy: bool) -> None:
        """Make `node`'s GPU busy (or idle again) from now on."""
        f = Path(self.switch_dir) / f"{node}.busy"
        if busy:
            f.parent.mkdir(parents=True, exist_ok=True)
            f.touch()
        else:
            f.unlink(missing_ok=True)

    def __call__(self) -> NvidiaSmiProbe:
        texts = self.busy if (Path(self.switch_dir) / f"{self.node()}.busy").exists() else self.idle

        def run(cmd: list[str]) -> str:
            return next(text for flag, text in texts.items() if any(a.startswith(flag) for a in cmd))

        return NvidiaSmiProbe(run=run)
