"""The thresholds every rule applies, built once per session from `[gates]` (pure).

One frozen `Policy` holds what the rules read: the noise threshold, the confirmations a sub-noise
win needs, the one-sided confidences of the paired tests, the repeat budget, the least GPU-time
gain, the repair and stop limits. The referee builds it once (`Policy.from_gates`) and hands it
to every rule; no rule reads `[gates]` itself. `screen()` is the same policy for a script metric
that only screens the direction because a per-launch profiler decides after it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Policy(BaseModel):
    """The rules' thresholds (defaults: DESIGN.md's `[gates]`). `noise_pct`: changes smaller than
    this (%) are noise; `confirmations`: same-direction measurements a sub-noise win needs;
    `confidence`: one-sided confidence of the final paired test; `screen_confidence`: that of the
    script metric when a per-launch profiler test follows; `max_rounds`: most candidate runs per
    verdict; `min_gpu_gain_pct`: least GPU-time gain (%) the keep metric accepts; `max_repairs`,
    `max_consecutive_regressions`: the repair and stop rules' limits; `idle_cpu_pct`,
    `exclusive_cpu`: which rounds ran under foreign load (rules/load.py).

    `profiler_confirms`: a profiler that times every launch (CUPTI, ncu) measures BEST and the
    candidate once more after the script metric (the keep metric), so that profiled run is the
    confirming measurement: the script metric is a screen for the direction, and its rounds are
    capped at max_rounds - 1 so that the candidate runs at most max_rounds times in all."""

    model_config = ConfigDict(frozen=True)

    noise_pct: float
    confirmations: int = 2
    confidence: float = 0.995
    screen_confidence: float = 0.95
    max_rounds: int = 3
    min_gpu_gain_pct: float = 0.2
    max_repairs: int = 3
    max_consecutive_regressions: int = 5
    profiler_confirms: bool = False
    #: the foreign load a round may run under (rules/load.py): other processes' share of all cores (%)
    #: at or above which a CPU run counts as under load (100: never), and the whole-machine gate
    idle_cpu_pct: float = 50.0
    exclusive_cpu: bool = False
    #: rounds of this verdict's budget spent on rounds left out of the decision (rules/load.py): the
    #: decision on the others may ask for script_rounds - spent_rounds rounds at most
    spent_rounds: int = 0

    @classmethod
    def from_gates(cls, gates: Any) -> Policy:
        """The policy of a `[gates]` section (kopt_mcp.config.GatesSection, or anything with its fields)."""
        return cls(**{name: getattr(gates, name) for name in cls.model_fields if hasattr(gates, name)})

    def screen(self) -> Policy:
        """This policy for a script metric that screens before a per-launch profiler test: its
        confidence is `screen_confidence` and `profiler_confirms` is set."""
        return self.model_copy(update={"confidence": self.screen_confidence, "profiler_confirms": True})

    @property
    def script_rounds(self) -> int:
        """Most paired script-metric rounds per verdict."""
        return max(1, self.max_rounds - 1) if self.profiler_confirms else self.max_rounds

    @property
    def rounds_left(self) -> int:
        """Rounds the decision may still count: `script_rounds` less those spent on rounds left out."""
        return max(0, self.script_rounds - self.spent_rounds)

    @property
    def decision_rounds(self) -> int:
        """Rounds a script-metric decision needs at least: 2 where the script metric alone keeps or
        counts a regression (min(2, script_rounds)), 1 where it screens for a profiler."""
        return 1 if self.profiler_confirms else min(2, self.script_rounds)

    @property
    def keep_confidence(self) -> float:
        """One-sided confidence of each look at a keep on the script metric alone. A keep can be
        declared after round k0 = min(2, confirmations, script_rounds) and after every round up to
        script_rounds, so each of those looks gets an equal share of 1 - confidence (Bonferroni):
        over the whole verdict an identical candidate is kept with probability <= 1 - confidence.
        Testing each look at `confidence` itself kept one 1.0-1.9% of the time (simulation,
        2026-11-24)."""
        return 1.0 - (1.0 - self.confidence) / self.keep_looks

    @property
    def keep_looks(self) -> int:
        """The rounds after which the script metric alone may keep: from round min(2, confirmations,
        script_rounds) up to script_rounds (the Bonferroni divisor of `keep_confidence`)."""
        return self.script_rounds - min(2, self.confirmations, self.script_rounds) + 1


__all__ = ["Policy"]
