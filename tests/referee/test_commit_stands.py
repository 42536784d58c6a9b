"""The commit step spends as few runs as the evidence needs (issue 34 item 6): a GPU-time verdict whose
bounds are tight, on the very tree it judged, is not re-measured in process; the out-of-process
confirmation measures it again (two runs). Where that confirmation cannot stand in (unavailable), the
in-process re-measure runs after all, so no keep is committed on nothing but its verdict.

The confirmation's measurement is planted here (its measuring is tested in tests/profilers/); the
runs, the sequencing, the codes and the cost are the referee's."""

from __future__ import annotations

import pytest

import kopt_mcp.referee.commit as commit
import kopt_mcp.referee.commit_measure as commit_measure
from kopt_mcp.evidence.confirm import TargetTime
from kopt_mcp.rules.confirm import decide_confirmation
from kopt_mcp.testing.toy import set_kernel
from tests.conftest import BASE_TIMES
from tests.replay_units import ReplayUnits

UNITS = {"1": 10.0, "2": 20.0}


def _commit_runs(r) -> list[str]:
    return sorted(p.name.split("-", 1)[1] for p in r.books.store.runs.iterdir() if "-commit-" in p.name)


def _planted(best_us: float, cand_us: float | None, calls: list):
    def confirm(sess, a, claim, by_unit=False):
        calls.append(by_unit)
        t = (lambda us: TargetTime(us=us, launches=12, groups=["k"], kernels=["k"]))
        c = decide_confirmation(100.0 * (claim[0] - claim[1]) / claim[0], claim[2] or 0.2, t(best_us),
                                t(cand_us) if cand_us is not None else None, "ncu")
        if cand_us is None:  # BEST not measurable out of process either: unavailable
            c = decide_confirmation(10.0, 0.2, None, None, "ncu", best_error="ncu: no permission to read counters")
        c.runs = ["confirm-candidate", "confirm-best"]
        return c
    return confirm


@pytest.fixture
def units_win(replayed_ref, monkeypatch):
    monkeypatch.setattr(commit_measure, "can_confirm", lambda sess: True)
    r = replayed_ref(ReplayUnits, UNIT_US=UNITS)
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": 9.0, "2": 18.0}, CODE="v2")
    v = r.save_and_test("global", "10% faster kernel")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win"), v.reason
    p = r.books.state.pending
    assert p.verdict.gpu_lo_pct is not None and p.verdict.gpu_lo_pct > 2 * p.gpu_floor_pct
    assert p.gpu_by_unit and p.candidate_run_dir
    return r


def test_a_tight_verdict_commits_on_its_confirmation_alone(units_win, monkeypatch):
    calls: list = []
    monkeypatch.setattr(commit, "confirm_out_of_process", _planted(27.0, 24.3, calls))
    c = units_win.commit_improvement("10% faster kernel")
    assert c.committed and c.code == "confirmed", c.reason
    assert _commit_runs(units_win) == []  # no in-process re-measure
    assert calls == [True]  # measured per harness unit, as the keep was judged
    assert c.cost is not None and c.cost.runs == 2
    assert "not re-measured in process" in units_win.where.repo.commit(c.commit).message


def test_an_unavailable_confirmation_falls_back_to_the_in_process_re_measure(units_win, monkeypatch):
    calls: list = []
    monkeypatch.setattr(commit, "confirm_out_of_process", _planted(27.0, None, calls))
    c = units_win.commit_improvement("10% faster kernel")
    assert c.committed and c.code == "unconfirmed", c.reason
    assert _commit_runs(units_win) == ["commit-best-1", "commit-candidate-1"]  # measured after all
    assert calls == [True]  # the confirmation ran once
    assert c.cost is not None and c.cost.runs == 4


def test_the_next_commits_confirmation_reuses_the_last_confirmed_tree_as_best(units_win, monkeypatch):
    """The first keep's confirmation runs both trees and stores the candidate's measurement; the second
    keep's BEST is that very tree, so its confirmation gets it back without running BEST (one run)."""
    import kopt_mcp.referee.confirmation as confirmation

    got: list = []

    def confirm_keep(run_profiled, cand_tree, best_tree, claimed_gain_pct, floor_pct, vendor, **kw):
        known = kw["best_known"]("sel")
        got.append((best_tree, known.us if known is not None else None))
        t = (lambda us: TargetTime(us=us, launches=12, groups=["k"], kernels=["k"]))
        best = known or t(27.0)
        c = decide_confirmation(claimed_gain_pct, floor_pct, best, t(best.us * (1 - claimed_gain_pct / 100)), "ncu")
        c.runs, c.selection, c.best_reused = ["confirm-candidate"] + ([] if known else ["confirm-best"]), "sel", bool(known)
        return c

    monkeypatch.setattr(confirmation, "confirm_keep", confirm_keep)
    first = units_win.commit_improvement("10% faster kernel")
    assert first.committed and first.code == "confirmed" and first.cost.runs == 2, first.reason
    stored = units_win.books.state.confirmed_tree
    assert stored is not None and stored.selection == "sel" and stored.time.us == pytest.approx(24.3, rel=0.02)
    set_kernel(units_win.where.workspace_path, BASE_TIMES, UNIT_US={"1": 8.0, "2": 16.0}, CODE="v3")
    v = units_win.save_and_test("global", "another 11% faster")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win"), v.reason
    second = units_win.commit_improvement("another 11% faster")
    assert second.committed and second.code == "confirmed", second.reason
    assert stored.commit == first.commit  # bound to the BEST_COMMIT that holds the measured tree
    assert got[0][1] is None and got[1][1] == stored.time.us  # BEST: the first keep
    assert second.cost.runs == 1  # the candidate's run only


def test_a_unit_judged_keeps_record_leads_with_the_gpu_time_per_class(units_win, monkeypatch):
    """performance.md and the commit message of a keep decided by GPU time per harness unit show each
    class's GPU-time change (target kernels and whole operation, + = faster) first, the script metric
    after it as the screen: on the H200 (fla-ln, 2026-12-02) the row's only change was the launch-bound
    script metric (-21.55% at T=256 for a keep whose kernel was 44% faster), read as a slowdown."""
    monkeypatch.setattr(commit, "confirm_out_of_process", _planted(27.0, 24.3, []))
    p = units_win.books.state.pending.verdict
    assert p.classes_gpu_pct and all(g == pytest.approx(10.0, abs=1.0) for g in p.classes_gpu_pct.values())
    c = units_win.commit_improvement("10% faster kernel")
    assert c.committed, c.reason
    rows = [r for r in (units_win.where.workspace_path / "performance.md").read_text().splitlines()
            if "| keep |" in r]
    assert rows and all("| GPU time +" in r and "; script " in r for r in rows)
    for key, gain in p.classes_gpu_pct.items():
        assert any(f"| {key}" in r and f"GPU time {gain:+.2f}%" in r for r in rows)
    body = units_win.where.repo.commit(c.commit).message.splitlines()
    assert body[3].startswith("save_and_test verdict: improved on profiler GPU time")
    assert body[4].startswith("script metric (the screen):")
