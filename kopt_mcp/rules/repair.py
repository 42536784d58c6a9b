"""The repair rule (DESIGN.md): a candidate that fails correctness stays in place (`repairing`);
up to `max_repairs` repair attempts may follow; still failing after the last one, it is abandoned
(patch archived, tree reverted), does not count as a regression, and the counters reset."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class RepairState(BaseModel):
    """The candidate under repair: the attempt that first failed, and repairs used so far."""

    first_attempt: int
    target: str
    hypothesis: str
    repairs_used: int = 0


RepairOutcome = Literal["repairing", "abandoned"]


def after_incorrect(current: RepairState | None, attempt: int, target: str, hypothesis: str,
                    max_repairs: int) -> tuple[RepairOutcome, RepairState | None]:
    """Next repair state after an `incorrect` result of `attempt`.

    First failure: `repairing` with 0 repairs used. A failing repair attempt uses one more; when
    `max_repairs` are used (FIX_ATTEMPTS 1..max_repairs), the outcome is `abandoned` (state None).
    With max_repairs == 0 the first failure is abandoned at once.
    """
    if current is None:
        if max_repairs == 0:
            return "abandoned", None
        return "repairing", RepairState(first_attempt=attempt, target=target, hypothesis=hypothesis)
    used = current.repairs_used + 1
    if used >= max_repairs:
        return "abandoned", None
    return "repairing", current.model_copy(update={"repairs_used": used})
