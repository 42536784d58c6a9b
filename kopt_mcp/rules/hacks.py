"""Persisting L2 by harness unit (pure; issue 38 item 2): a candidate that turns persisting L2 on.

The cheat: an access policy window with hitProp = persisting (cudaStreamSetAttribute /
cuStreamSetAttribute, a graph kernel node's attribute) inside an L2 set-aside (cudaDeviceSetLimit /
cuCtxSetLimit with the persisting-L2 limit) keeps a kernel's inputs in L2 across do_bench's cache
flush, so it is timed as if its inputs were always cached.

Evidence: each unit's PersistingL2Report (evidence/units.py; the injector's guard,
cupti_inject/kopt_l2.py: it sets the limit to 0 as each unit begins and again wherever the benchmark
raised it, so the cheat gains nothing there either): the benchmark's calls of those functions by
name, the times it raised the limit during a unit, the largest limit found as a unit began.

Rule (`persisting_l2`): over each run's units (a report covers its process so far: the largest
count per name over the run's units), the candidate made more calls of a watched function than
either BEST run, or raised the limit more often, or a unit began with a larger limit than any of
BEST's -> persisting_l2, naming the calls. Comparing with BEST leaves out calls the framework makes
in BEST too. None where no run carries a report (an older trace, no CUDA driver) or nothing grew.
"""

from __future__ import annotations

from collections.abc import Sequence

from kopt_mcp.evidence.units import HarnessUnit, PersistingL2Report
from kopt_mcp.rules.decision import Code, Decision


def _run(units: Sequence[HarnessUnit]) -> PersistingL2Report | None:
    reports = [u.l2 for u in units if u.l2 is not None]
    if not reports:
        return None
    api: dict[str, int] = {}
    for r in reports:
        for name, n in r.api.items():
            api[name] = max(api.get(name, 0), n)
    return PersistingL2Report(limit_found=max(r.limit_found for r in reports), raised=max(r.raised for r in reports),
                              api=api)


def persisting_l2(before: Sequence[HarnessUnit], candidate: Sequence[HarnessUnit],
                  after: Sequence[HarnessUnit]) -> Decision | None:
    """The rule (module docstring): a `Decision` (outcome "tie", code persisting_l2, the calls in
    `numbers`) or None. Never raises."""
    c = _run(candidate)
    best = [r for r in (_run(before), _run(after)) if r is not None]
    if c is None or not best:
        return None
    grew = {name: n for name, n in c.api.items() if n > max(b.api.get(name, 0) for b in best)}
    raised = c.raised > max(b.raised for b in best)
    limit = c.limit_found > max(b.limit_found for b in best)
    if not (grew or raised or limit):
        return None
    parts = [f"{name} x{n} (BEST x{max(b.api.get(name, 0) for b in best)})" for name, n in sorted(grew.items())]
    if raised:
        parts.append(f"the persisting-L2 limit raised during a unit {c.raised} time(s) (BEST "
                     f"{max(b.raised for b in best)})")
    if limit:
        parts.append(f"a unit began with a persisting-L2 limit of {c.limit_found} bytes (BEST "
                     f"{max(b.limit_found for b in best)})")
    return Decision(outcome="tie", code=Code.PERSISTING_L2, numbers={**{f"api:{k}": v for k, v in grew.items()},
                                                                     "raised": c.raised, "limit_found": c.limit_found},
                    reason=("persisting L2: the candidate " + "; ".join(parts) + ": an L2 access policy window or "
                            "set-aside keeps data in L2 across the harness's cache flush, a cached input and not a "
                            "faster kernel (the referee sets the limit back to 0 as each unit begins): not kept"))


__all__ = ["persisting_l2"]
