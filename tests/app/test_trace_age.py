"""app/trace_age.py on ledger records as the ledger holds them (events.as_events): a trace followed by
a keep or by another slot's move of BEST is stale; one of a candidate's edits is stale; one with no
keep since is current; a record written before traces named their BEST is judged on keeps alone."""

from __future__ import annotations

from kopt_mcp.app.trace_age import trace_age, trace_status
from kopt_mcp.events import as_events

BEST = "b" * 40


def _events(*recs: dict) -> list:
    return as_events([{"at": f"2026-12-01T10:0{i}:00+00:00", **r} for i, r in enumerate(recs)])


TRACE = {"event": "trace", "backend": "cupti", "best_commit": "a" * 40, "of_best": True}


def test_no_trace():
    assert trace_age(_events({"event": "commit", "attempt": 1, "commit": BEST}), BEST) is None
    assert trace_status([], BEST).startswith("none yet")


def test_keeps_after_the_trace_make_it_stale_and_are_named():
    ev = _events(TRACE, {"event": "commit", "attempt": 3, "commit": "c" * 40},
                 {"event": "best_moved", "best_commit": BEST}, {"event": "commit", "attempt": 7, "commit": BEST})
    age = trace_age(ev, BEST)
    assert (age.stale, age.keeps_since) == (True, (3, None, 7))
    assert age.text.startswith("STALE: taken 2026-12-01T10:00:00+00:00, before 3 keeps (attempt 3, attempt 7) moved "
                               f"BEST_COMMIT to {BEST[:12]}") and "kernel_trace_analysis" in age.text


def test_a_trace_of_edits_is_stale_one_of_best_is_current_and_the_newest_counts():
    assert trace_age(_events({**TRACE, "of_best": False}), BEST).stale
    cur = trace_age(_events({**TRACE, "best_commit": BEST}), BEST)
    assert (cur.stale, cur.text) == (False, f"current: taken 2026-12-01T10:00:00+00:00, of BEST_COMMIT {BEST[:12]}")
    ev = _events(TRACE, {"event": "commit", "attempt": 2, "commit": BEST}, {**TRACE, "best_commit": BEST})
    assert trace_age(ev, BEST).stale is False  # refreshed after the keep


def test_an_old_record_without_its_best():
    old = {"event": "trace", "backend": "ncu"}
    assert trace_age(_events(old), BEST).stale is False
    assert trace_age(_events(old, {"event": "best_moved", "best_commit": BEST}), BEST).keeps_since == (None,)
