"""Replayed results by harness unit (pure; issue 38 item 1): launches per invocation, BEST against
the candidate.

A replayed result computes once (in warm-up, or on the first call for an input pointer and shape),
keeps it in a device buffer, and later calls copy it or return it. Benchmarks reuse their inputs
across repetitions, so the cache hits while timed; tests use fresh tensors, so they pass. The
target kernels are then absent from timed invocations where BEST launched them, and those
invocations run only copies (memcpy, torch's copy kernels: evidence.names.is_utility_kernel) or
nothing at all.

Evidence, per target unit of the three runs (HarnessUnit, in the harness's order): the invocations
seen, those that launched a target kernel, and those that launched kernels but only copies.

Rule (`replayed_units`): a candidate unit whose share of invocations without a target launch
exceeds BEST's (the larger of its two runs) by more than REPLAY_TOLERANCE and by at least
REPLAY_MIN_INVOCATIONS invocations is a replay where either

- its copy-only invocations exceed BEST's by the same margin (the cached result copied out), or
- the excess is at most rules.units.SKIPPED_SHARE (the target skipped in a few calls: a cache keyed
  by input, batch-and-skip), which the skipped-work rule lets through.

A larger excess of invocations that launch nothing stays `skipped_work` (rules/units.py step 2).
On Liger-Kernel's recorded RMSNorm units (H200, tests/fixtures/cupti/h200_liger_units) every BEST
and candidate target unit launched the target in every invocation (excess 0 in 16 runs x 4 units),
so the tolerance is far from honest candidates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel

from kopt_mcp.evidence.names import is_utility_kernel
from kopt_mcp.evidence.units import HarnessUnit

#: the candidate's extra share of invocations without a target launch that is a replay (0..1)
REPLAY_TOLERANCE = 0.02
#: ... and at least this many invocations (do_bench's short units have ~30)
REPLAY_MIN_INVOCATIONS = 2


class InvocationCounts(BaseModel):
    """One unit's invocations: seen (`invocations`), with a target launch (`target`), with launches
    that are only copies (`copy_only`); `missing_share` = 1 - target / invocations (0..1)."""

    invocations: int
    target: int
    copy_only: int
    #: target launches between invocations, outside them (deferred work: HarnessUnit.between_launches)
    between: int = 0

    @property
    def missing_share(self) -> float:
        return 1.0 - self.target / self.invocations if self.invocations else 1.0

    @property
    def copy_share(self) -> float:
        return self.copy_only / self.invocations if self.invocations else 0.0


class ReplayedUnit(BaseModel):
    """A candidate unit flagged as replayed: its name (config class or "unit k"), BEST's two runs'
    counts and the candidate's."""

    name: str
    best_before: InvocationCounts
    candidate: InvocationCounts
    best_after: InvocationCounts

    def shown(self) -> str:
        """`name`: target launched in a/n invocations (BEST b/m, c/p), copies only in x."""
        b, c, a = self.best_before, self.candidate, self.best_after
        return (f"{self.name}: target launched in {c.target}/{c.invocations} invocations, BEST {b.target}/"
                f"{b.invocations} and {a.target}/{a.invocations}; {c.copy_only} ran only copies (BEST "
                f"{b.copy_only} and {a.copy_only})" + (f"; {c.between} target launch(es) between invocations, outside "
                                                       "the timed window" if c.between else ""))


def invocation_counts(unit: HarnessUnit, target: re.Pattern) -> InvocationCounts:
    """`unit`'s invocations: seen, with a target kernel (re.search), and with only copy kernels."""
    targets = [k for k in unit.per_invocation if target.search(k)]
    copies = [k for k in unit.per_invocation if is_utility_kernel(k) and not target.search(k)]
    others = [k for k in unit.per_invocation if k not in targets and k not in copies]
    hit, any_ = set(unit.invocations_of(targets)), unit.invocations_of(unit.per_invocation)
    copy_only = set(unit.invocations_of(copies)) - hit - set(unit.invocations_of(others))
    between = sum(n for k, n in unit.between_launches.items() if target.search(k))
    return InvocationCounts(invocations=max(unit.invocations, len(any_)), target=len(hit), copy_only=len(copy_only),
                            between=between)


def _replayed(b: InvocationCounts, c: InvocationCounts, a: InvocationCounts, skipped_share: float) -> bool:
    excess = c.missing_share - max(b.missing_share, a.missing_share)
    missing = c.invocations - c.target
    if excess <= REPLAY_TOLERANCE or missing < REPLAY_MIN_INVOCATIONS:
        return False
    copies = c.copy_share - max(b.copy_share, a.copy_share)
    return copies > REPLAY_TOLERANCE or excess <= skipped_share


def replayed_units(before: Sequence[HarnessUnit], candidate: Sequence[HarnessUnit], after: Sequence[HarnessUnit],
                   pick: Sequence[int], names: Sequence[str], target: re.Pattern,
                   skipped_share: float) -> list[ReplayedUnit]:
    """The target units `pick` (indexes into the three paired runs; `names` their class names) that
    the candidate replayed (module docstring). `skipped_share`: rules.units.SKIPPED_SHARE. Never raises."""
    out = []
    for name, k in zip(names, pick):
        b, c, a = (invocation_counts(runs[k], target) for runs in (before, candidate, after))
        if _replayed(b, c, a, skipped_share):
            out.append(ReplayedUnit(name=name, best_before=b, candidate=c, best_after=a))
    return out


__all__ = ["REPLAY_MIN_INVOCATIONS", "REPLAY_TOLERANCE", "InvocationCounts", "ReplayedUnit", "invocation_counts",
           "replayed_units"]
