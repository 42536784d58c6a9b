"""Charts from a real session's ledger: the extracted data on exact numbers, valid PNGs, empty ledgers."""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import pytest

from kopt_mcp.app.tools.charts import progress_plot
from kopt_mcp.referee import Referee
from kopt_mcp.testing.toy import make_toy_repo, set_kernel
from kopt_mcp.views import charts

BASE = {"1": 100.0, "2": 200.0}  # us per call; lower is better


@pytest.fixture(scope="module")
def events(tmp_path_factory) -> list[dict]:
    """Ledger of: baseline, improved + commit, regressed, tie, divergent (target n=1), incorrect."""
    tmp = tmp_path_factory.mktemp("charts")
    ref = Referee(make_toy_repo(tmp / "repo", BASE), tag="t", lease_dir=tmp / "leases")
    try:
        ref.run_benchmark()
        ws = ref.where.workspace_path
        steps = [({"1": 80.0, "2": 160.0}, None, "global", "improved"),
                 ({"1": 96.0, "2": 192.0}, None, "global", "regressed"),
                 ({"1": 80.08, "2": 160.16}, None, "global", "tie"),
                 ({"1": 48.0, "2": 208.0}, None, "n=1", "divergent"),
                 ({"1": 40.0, "2": 80.0}, {"2": 3}, "global", "incorrect")]
        for times, errors, target, expect in steps:
            set_kernel(ws, times, errors)
            assert ref.save_and_test(target, f"expect {expect}").verdict == expect
            if expect == "improved":
                assert ref.commit_improvement("faster").committed
        ref.revert_to_best("give up the wrong one")
        evs = ref.books.store.ledger()
        if out := os.environ.get("KOPT_CHART_DIR"):  # to look at them
            Path(out, "progress.png").write_bytes(charts.progress_chart(evs, "us_per_call", False))
            Path(out, "last_verdict.png").write_bytes(charts.last_verdict_chart(evs, ref.what.cfg.gates.noise_pct))
        return evs
    finally:
        ref.close()


def _png_ok(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    img = matplotlib.image.imread(io.BytesIO(png))
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100 and img.std() > 0  # not blank
    return img.shape[:2]


def test_progress_data_exact(events):
    d = charts.progress_data(events)
    assert d.classes == ["n=1", "n=2"] and d.baseline == {"n=1": 100.0, "n=2": 200.0}
    assert d.best == {"n=1": [(0, 100.0, "baseline"), (1, 80.0, "commit")],
                      "n=2": [(0, 200.0, "baseline"), (1, 160.0, "commit")]}
    assert [(m.attempt, m.verdict, m.values) for m in d.marks] == [
        (1, "improved", {"n=1": 80.0, "n=2": 160.0}),
        (2, "regressed", {"n=1": 96.0, "n=2": 192.0}),
        (3, "tie", {"n=1": 80.08, "n=2": 160.16}),
        (4, "divergent", {"n=1": 48.0, "n=2": 208.0}),
        (5, "incorrect", {}),  # no valid measurement: drawn on the x axis
    ]
    assert d.commits == [1] and d.last_x == 5


def test_last_verdict_data_exact(events):
    lv = charts.last_verdict_data(events)
    assert (lv.attempt, lv.verdict, lv.target, lv.hypothesis) == (4, "divergent", "n=1", "expect divergent")
    assert [r[0] for r in lv.rows] == ["n=1", "n=2"]
    assert lv.rows[0][1] == pytest.approx(40.0) and lv.rows[1][1] == pytest.approx(-30.0)  # % (+ = better)
    assert lv.rows[0][2] == pytest.approx([40.0, 40.0])  # divergence is confirmed by a second round
    assert lv.later == [(5, "incorrect")]


def test_progress_summary_numbers(events):
    p = progress_plot(events, "us_per_call", False)
    assert (p.attempts, p.commits) == (5, 1)
    assert p.verdicts == {"improved": 1, "regressed": 1, "tie": 1, "divergent": 1, "incorrect": 1}
    assert [(c.key, c.baseline, c.best, c.pct_of_baseline) for c in p.classes] == [
        ("n=1", 100.0, 80.0, 80.0), ("n=2", 200.0, 160.0, 80.0)]
    assert "lower is better" in p.summary and "n=1: baseline 100 -> BEST 80 us_per_call (80% of baseline)" in p.summary


def test_charts_of_the_session_are_pngs(events):
    h, w = _png_ok(charts.progress_chart(events, "us_per_call", False))
    one = [{**e, "metrics": {"n=1": 100.0}} if e.get("event") == "baseline" else e for e in events
           if e.get("event") != "commit"]
    assert _png_ok(charts.progress_chart(one, "us_per_call", False)) < (h, w)  # one panel per class, stacked
    _png_ok(charts.last_verdict_chart(events, noise_pct=1.0))


def test_charts_follow_the_data(events):
    assert charts.progress_chart(events[:4], "us_per_call") != charts.progress_chart(events, "us_per_call")
    assert charts.last_verdict_chart(events, 1.0) != charts.last_verdict_chart(events, 25.0)  # noise band drawn
    early = [e for e in events if e.get("event") != "attempt" or e.get("attempt") == 1]
    assert charts.last_verdict_data(early).verdict == "improved"


def test_empty_and_baseline_only_ledgers():
    for evs in ([], None):
        _png_ok(charts.progress_chart(evs, "us_per_call", False))
        _png_ok(charts.last_verdict_chart(evs))
    base = [{"event": "baseline", "metrics": {"n=1": 100.0, "n=2": 200.0}}]
    d = charts.progress_data(base)
    assert d.marks == [] and d.best["n=2"] == [(0, 200.0, "baseline")] and charts.last_verdict_data(base) is None
    _png_ok(charts.progress_chart(base, "GB/s", True))
    _png_ok(charts.last_verdict_chart(base, 1.0))
    assert "No baseline yet" in progress_plot([], "us_per_call", False).summary


def test_records_that_do_not_fit_their_model_are_set_aside_never_raised_on():
    junk = [None, "x", {"event": "attempt"}, {"event": "attempt", "attempt": "three", "verdict": "tie"},
            {"event": "baseline", "metrics": {"a": "x", "b": 1.0}},
            {"event": "attempt", "attempt": 1, "verdict": "improved", "classes": [{"key": "c"}, "junk"]},
            {"event": "commit", "attempt": 1, "metrics": None},
            {"event": "attempt", "attempt": 2, "verdict": None, "classes": None},
            {"event": "no_such_event", "attempt": 9}]
    d = charts.progress_data(junk)
    assert (d.classes, d.marks, d.commits, d.last_x) == ([], [], [], 0)  # every record above is set aside
    assert charts.last_verdict_data(junk) is None
    fine = [{"event": "baseline", "metrics": {"c": 2.0, "b": math.nan, "d": math.inf}},  # non-finite: skipped
            {"event": "attempt", "attempt": 1, "verdict": "improved",
             "classes": [{"key": "c", "candidate": 1.0, "mean_pct": 5.0, "deltas_pct": [None, 5.0]},
                         {"key": "d", "candidate": None, "mean_pct": None}]}]
    d = charts.progress_data(junk + fine)
    assert d.classes == ["c"] and [(m.attempt, m.verdict, m.values) for m in d.marks] == [(1, "improved", {"c": 1.0})]
    assert charts.last_verdict_data(junk + fine).rows == [("c", 5.0, [5.0])]
    _png_ok(charts.progress_chart(junk + fine, "score", True))
    _png_ok(charts.last_verdict_chart(junk + fine, noise_pct=math.nan))
    _png_ok(charts.progress_chart(junk, "score", True))


def test_many_classes_use_two_columns_and_at_most_eight_panels():
    keys = [f"M={2 ** i}" for i in range(10)]
    evs = [{"event": "baseline", "metrics": dict.fromkeys(keys, 10.0)},
           {"event": "attempt", "attempt": 1, "verdict": "regressed",
            "classes": [{"key": k, "best": 10.0, "candidate": 11.0, "deltas_pct": [-10.0], "mean_pct": -10.0}
                        for k in keys]}]
    h, w = _png_ok(charts.progress_chart(evs, "us"))
    assert w > h * 0.9  # 2 columns x 4 rows
    _png_ok(charts.last_verdict_chart(evs, 2.0))


def test_importing_the_server_does_not_import_matplotlib():
    code = "import sys, kopt_mcp.app.server, kopt_mcp.views.charts; sys.exit('matplotlib' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
