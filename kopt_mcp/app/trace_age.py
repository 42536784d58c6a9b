"""Is the latest trace still about BEST_COMMIT? research_directions and program.md show the latest
`trace` record of the ledger; one taken before BEST moved (a keep, or another slot's keep), or of a
workspace holding a candidate's edits, is stale, and both say so and offer to refresh it
(kernel_trace_analysis profiles the workspace again)."""

from __future__ import annotations

from dataclasses import dataclass

from kopt_mcp.events import BestMoved, Commit, Trace

REFRESH = "call kernel_trace_analysis to refresh it (it profiles the workspace at BEST_COMMIT when it has no edits)"


@dataclass(frozen=True)
class TraceAge:
    """The latest trace (`trace`), whether it is stale, the keeps made since it was taken (attempt
    numbers; BEST moved by another slot counts as None) and `text`: one line saying which."""

    trace: Trace
    stale: bool
    keeps_since: tuple[int | None, ...]
    text: str


def trace_age(events: list, best_commit: str) -> TraceAge | None:
    """How old the newest `trace` record among `events` (oldest first) is against `best_commit`:
    stale when BEST moved after it (a `commit` or `best_moved` record follows it) or when it profiled
    a candidate's edits (`of_best` False); None without a trace. Records written before traces named
    their BEST are judged on the keeps that follow them alone."""
    at = next((i for i in range(len(events) - 1, -1, -1) if isinstance(events[i], Trace)), None)
    if at is None:
        return None
    t: Trace = events[at]
    keeps = tuple(e.attempt if isinstance(e, Commit) else None for e in events[at + 1:]
                  if isinstance(e, (Commit, BestMoved)))
    when = f"taken {t.at}" if t.at else "taken earlier"
    if keeps:
        named = [f"attempt {k}" for k in keeps if k is not None]
        what = f"{len(keeps)} keep{'s' if len(keeps) != 1 else ''}" + (f" ({', '.join(named)})" if named else "")
        text = (f"STALE: {when}, before {what} moved BEST_COMMIT to {best_commit[:12]}; its hot spots may have "
                f"moved: {REFRESH}")
        return TraceAge(t, True, keeps, text)
    if t.of_best is False:
        return TraceAge(t, True, (), f"STALE: {when} of a candidate's edits, not of BEST_COMMIT {best_commit[:12]}: "
                        f"{REFRESH}")
    of = f"of BEST_COMMIT {best_commit[:12]}" if t.best_commit == best_commit else "with no keep since"
    return TraceAge(t, False, (), f"current: {when}, {of}")


def trace_status(events: list, best_commit: str) -> str:
    """program.md's line on the latest trace: none yet, current, or stale with how to refresh it."""
    age = trace_age(events, best_commit)
    if age is None:
        return "none yet: call kernel_trace_analysis before the first hypothesis"
    return age.text
