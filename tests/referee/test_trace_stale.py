"""A trace older than BEST is marked stale (issue 36 item 8): research_directions and program.md show
the latest trace as current while BEST has not moved since it was taken, and as STALE, with the
offer to refresh it (kernel_trace_analysis), after a keep or when it profiled a candidate's edits.
Traces come from the recorded CUPTI trace, replayed (tests/replay_cupti.py)."""

from __future__ import annotations

from kopt_mcp.app.program import render_program
from kopt_mcp.app.prompts import research_directions
from kopt_mcp.app.trace_age import trace_age
from kopt_mcp.events import Trace, last
from kopt_mcp.testing.toy import set_kernel

FASTER = {"1": 50.0, "2": 100.0}


def _latest_line(r) -> str:
    return next(x for x in render_program(r).splitlines() if x.startswith("- latest trace:"))


def test_a_trace_goes_stale_when_a_keep_moves_best_and_a_new_one_is_current(cupti_ref):
    r = cupti_ref(1000.0)
    assert _latest_line(r).startswith("- latest trace: none yet")
    assert r.kernel_trace_analysis().available
    t = last(r.books.store.events(), Trace)
    assert (t.best_commit, t.of_best) == (r.books.state.best.commit, True)
    assert "Trace current: " in research_directions(r) and "latest trace: current" in _latest_line(r)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=500.0)
    v = r.save_and_test("global", "halve")
    assert v.verdict == "improved", v.reason
    assert r.commit_improvement("halve").committed
    age = trace_age(r.books.store.events(), r.books.state.best.commit)
    assert (age.stale, age.keeps_since) == (True, (v.attempt,))
    text = research_directions(r)
    assert f"Trace STALE: taken {t.at}, before 1 keep (attempt {v.attempt}) moved BEST_COMMIT to " \
           f"{r.books.state.best.commit[:12]}" in text and "kernel_trace_analysis" in text.split("Trace STALE", 1)[1]
    assert "STALE" in _latest_line(r) and "kernel_trace_analysis" in _latest_line(r)
    r.kernel_trace_analysis()  # refreshed: of the new BEST
    assert trace_age(r.books.store.events(), r.books.state.best.commit).stale is False
    assert "Trace current: " in research_directions(r)


def test_a_trace_of_a_candidates_edits_is_not_one_of_best(cupti_ref):
    r = cupti_ref(1000.0)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=500.0)  # edits in the workspace, not tested yet
    r.kernel_trace_analysis()
    t = last(r.books.store.events(), Trace)
    assert t.of_best is False
    age = trace_age(r.books.store.events(), r.books.state.best.commit)
    assert (age.stale, age.keeps_since) == (True, ()) and "of a candidate's edits" in age.text
