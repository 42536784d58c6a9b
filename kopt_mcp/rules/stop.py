"""The stop rule (DESIGN.md): `max_consecutive_regressions` (5) measured regressions in a row stop
the session; the last five regressions are kept as a window for the Stop Summary."""

from __future__ import annotations

from pydantic import BaseModel

WINDOW = 5


class RegressionNote(BaseModel):
    """One regression for the Stop Summary table. `change_pct`: target improvement (negative)."""

    attempt: int
    at: str
    target: str
    hypothesis: str
    change_pct: float


class RegressionCounter(BaseModel):
    """Consecutive measured regressions and the window of the last WINDOW of them."""

    consecutive: int = 0
    window: list[RegressionNote] = []

    def regressed(self, note: RegressionNote) -> RegressionCounter:
        """Counter after a `regressed` verdict: +1, note appended (window trimmed to WINDOW)."""
        return RegressionCounter(consecutive=self.consecutive + 1, window=[*self.window, note][-WINDOW:])

    def reset(self) -> RegressionCounter:
        """Counter after a tie, failed, abandoned, divergent verdict or a commit: 0, window kept."""
        return RegressionCounter(consecutive=0, window=self.window)


def should_stop(counter: RegressionCounter, max_consecutive: int) -> bool:
    """True when `max_consecutive` measured regressions came in a row."""
    return counter.consecutive >= max_consecutive
