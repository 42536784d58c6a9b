"""What a session measures and judges: the frozen config and the rules' thresholds."""

from __future__ import annotations

from dataclasses import dataclass

from kopt_mcp.config import ConfigFile, TargetConfig
from kopt_mcp.rules.policy import Policy


@dataclass(frozen=True)
class What:
    """The session's frozen `config` (kopt.toml as loaded, with its sha256), its `cfg` (the
    `[target]` part: benchmark, correctness, gates, profiler, cluster) and the `policy`: the rules'
    thresholds built from the frozen `[gates]` (kopt_mcp/rules/policy.py)."""

    config: ConfigFile
    policy: Policy

    @classmethod
    def of(cls, config: ConfigFile) -> What:
        """`config` with the policy of its `[gates]`."""
        return cls(config=config, policy=Policy.from_gates(config.target.gates))

    @property
    def cfg(self) -> TargetConfig:
        """The frozen target (`config.target`)."""
        return self.config.target
