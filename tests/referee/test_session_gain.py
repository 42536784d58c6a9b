"""The session's measured result (referee/gain.py measure_session_gain, `kopt-mcp compare`): the
baseline commit against BEST_COMMIT in one paired run on one lease, per class with bounds, GPU time
where a profiler exists; read-only; the Stop Summary's and the report's headline. The toy repository
plants a 2x difference (exact metrics), so nothing here depends on the machine's noise."""

from __future__ import annotations

import json

import pytest

from kopt_mcp.app.cli import main
from kopt_mcp.errors import RefereeError
from kopt_mcp.referee.recovery import stop
from kopt_mcp.testing.toy import set_kernel

HALF = {"1": 50.0, "2": 100.0}  # 2x faster in both classes


def _kept(r, times=HALF, **flags):
    set_kernel(r.where.workspace_path, times, **flags)
    assert r.save_and_test("global", "halve").verdict == "improved"
    assert r.commit_improvement("halve").committed


def _state(r) -> dict:
    return r.books.state.model_dump(exclude={"outbox"})


def test_the_baseline_against_best_measures_the_planted_2x_and_changes_nothing(ref):
    _kept(ref)
    before, ws_head = _state(ref), ref.where.ws.head.commit.hexsha
    g = ref.measure_session_gain()
    assert g.base_commit == ref.where.ws.commit("kernel-opt/t~1").hexsha  # the `kopt: baseline` commit
    assert g.head_commit == ref.books.state.best.commit == ws_head
    assert (g.outcome, g.rounds, g.target) == ("improved", 2, "global")
    assert g.target_pct == pytest.approx(50.0) and g.ratio_x == pytest.approx(2.0)
    assert {c.key: (c.base, c.head, c.mean_pct) for c in g.classes} == {
        "n=1": (100.0, 50.0, pytest.approx(50.0)), "n=2": (200.0, 100.0, pytest.approx(50.0))}
    assert all(c.interval.lo_pct == pytest.approx(50.0) for c in g.classes)  # exact toy numbers: no spread
    assert g.gpu_gain_pct is None and g.device.vendor == "cpu"
    assert _state(ref) == before and ref.where.ws.head.commit.hexsha == ws_head  # read-only
    rec = [e for e in ref.books.store.ledger() if e["event"] == "session_gain"]
    assert len(rec) == 1 and rec[0]["head_commit"] == g.head_commit and rec[0]["ratio_x"] == pytest.approx(2.0)


def test_its_headline_heads_the_stop_summary_and_the_report(ref):
    _kept(ref)
    g = ref.measure_session_gain()
    with ref.lock:
        stop(ref, "enough")
        ref.books.save()
    summary = (ref.where.workspace_path / "performance.md").read_text().split("## Stop Summary", 1)[1]
    assert f"session gain (measured): {g.headline}" in summary
    from kopt_mcp.views.report_html import render_report

    page = render_report(ref.books.store.ledger(), {})
    assert 'id="session-gain"' in page and "+50.00%" in page and "2x" in page
    assert page.index('id="session-gain"') < page.index('id="summary"')  # the headline comes first


def test_any_two_commits_and_the_refusals(ref):
    best = ref.books.state.best.commit
    with pytest.raises(RefereeError, match="same commit"):
        ref.measure_session_gain()  # no keep yet: baseline == BEST
    with pytest.raises(RefereeError, match="names no commit"):
        ref.measure_session_gain(base="no-such-rev")
    _kept(ref)
    g = ref.measure_session_gain(base=ref.books.state.best.commit, head=best)  # backwards: BEST -> baseline
    assert g.outcome == "regressed" and g.ratio_x == pytest.approx(0.5)


def test_before_the_baseline_it_says_what_to_call(toy_repo, make_referee):
    r = make_referee(toy_repo)
    with pytest.raises(RefereeError, match="run_benchmark first"):
        r.measure_session_gain()


def test_gpu_time_is_measured_where_a_profiler_exists(cupti_ref):
    r = cupti_ref(1000.0)  # BEST's kernel: 1000 us of GPU time per step (tests/replay_cupti.py)
    _kept(r, HALF, GPU_US=500.0)
    spreads = list(r.books.state.gpu_spreads_pct)
    g = r.measure_session_gain()
    assert g.gpu_base_us == pytest.approx(50.0) and g.gpu_head_us == pytest.approx(25.0)  # median launch (us)
    assert g.gpu_gain_pct == pytest.approx(50.0, abs=0.01)
    assert sum("gain-base-profile" in d for d in g.run_dirs) == 2 and sum("gain-head-profile" in d for d in g.run_dirs) == 1
    assert r.books.state.gpu_spreads_pct == spreads  # the session's GPU-time noise is not extended


def test_cli_compare_prints_json_and_refuses_while_a_server_holds_the_repository(ref, toy_repo, capsys):
    _kept(ref)
    assert main(["compare", "--repo", str(toy_repo), "--tag", "t", "--json"]) == 2  # `ref` holds the lock
    assert "measure_session_gain" in capsys.readouterr().err
    ref.close()
    assert main(["compare", "--repo", str(toy_repo), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "improved" and out["ratio_x"] == pytest.approx(2.0)
    assert main(["compare", "--repo", str(toy_repo), "--tag", "nope"]) == 2
    assert "sessions found: t" in capsys.readouterr().err
