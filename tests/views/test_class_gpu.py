"""The report and the charts show the metric that decided (issue 34 items 2 and 3, the view part):
GPU time per config class (target kernels and whole operation, BEST vs candidate, % and x) where the
keep metric was profiler GPU time per harness unit, the script metric as a screen beside it; and an
improved attempt whose commit was refused shown as refused, never as a keep, BEST not moving for it.

The keep decisions are real: rules/units.py judge_units on the harness units recorded on H200s from
Liger-Kernel's own RMSNorm benchmark (tests/fixtures/cupti/*/SOURCE.md); the ledgers are written with
the project's own writers (ledger.Store, new_record), the refusal as commit_improvement records it."""

from __future__ import annotations

import gzip
import itertools
import json
import re
from pathlib import Path

import pytest

from kopt_mcp.app.tools.charts import progress_plot
from kopt_mcp.events import as_events
from kopt_mcp.evidence.units import HarnessUnit
from kopt_mcp.ledger import Store, new_record
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.units import UnitKeepDecision, judge_units, unit_spread_pct
from kopt_mcp.views import charts
from kopt_mcp.views.gpu_charts import class_gpu_chart, gpu_series
from kopt_mcp.views.gpu_classes import class_gpu_data
from kopt_mcp.views.report_html import render_report

CUPTI = Path(__file__).resolve().parents[1] / "fixtures" / "cupti"
TARGET = "_rms_norm_(forward|backward)_kernel"
CLASSES = [f"{m} T={t}" for m in ("forward", "backward", "full") for t in (1024, 2048, 4096, 8192)]
BASE = ["0000-baseline-profile", "0000-baseline-profile-2", "0000-baseline-profile-3", "0000-baseline-profile-4"]
#: the script metric per class of a comment-only candidate on this harness (launch-bound noise): % change
SCREEN = {k: -190.0 + 10 * i for i, k in enumerate(CLASSES)}


def _runs(name: str) -> dict[str, list[HarnessUnit]]:
    raw = json.loads(gzip.decompress((CUPTI / name / "units.json.gz").read_bytes()))
    return {k: [HarnessUnit.model_validate(u) for u in v] for k, v in raw.items()}


def _judge(runs, n: int, spreads: list[float]) -> UnitKeepDecision:
    return judge_units(runs[f"000{n}-best-1"], runs[f"000{n}-candidate-1"], runs[f"000{n}-best-2"], TARGET,
                       Policy(noise_pct=1.0), spreads, CLASSES)


def _attempt(n: int, d: UnitKeepDecision, screen: dict[str, float] | None = None) -> dict:
    classes = [{"key": k, "best": 100.0, "candidate": 100.0 - v, "deltas_pct": [v], "mean_pct": v}
               for k, v in (screen or {}).items()]
    return new_record("attempt", attempt=n, verdict=d.outcome, code=str(d.code), reason=d.reason, target="global",
                      hypothesis=f"attempt {n}", classes=classes, gpu=d.model_dump())


@pytest.fixture(scope="module")
def liger(tmp_path_factory):
    """A session on the recorded H200 units: attempt 1 (identical: tie), 2 (regressed), 3 (improved, its
    commit refused at the re-measure: no_longer_better), 5 (improved, committed). Returns (events, the
    decisions by attempt)."""
    runs = _runs("h200_liger_units")
    spreads = [unit_spread_pct(runs[a], runs[b], TARGET) for a, b in itertools.pairwise(BASE)]
    decisions = {}
    for n in (1, 2, 3, 5):
        decisions[n] = _judge(runs, n, spreads)
        spreads.append(unit_spread_pct(runs[f"000{n}-best-1"], runs[f"000{n}-best-2"], TARGET))
    store = Store(tmp_path_factory.mktemp("ledger") / "kopt" / "r")
    store.append(new_record("session_started", tag="r", branch="kopt/r", best_commit="a" * 40))
    store.append(new_record("baseline", best_commit="a" * 40, metrics=dict.fromkeys(CLASSES, 100.0),
                            gpu_us=round(decisions[1].gpu_best_us, 1)))
    for n, d in decisions.items():
        store.append(_attempt(n, d, SCREEN if n == 1 else None))
        if n == 3:
            store.append(new_record("commit_refused", attempt=3, code="no_longer_better", reason="re-measure: worse",
                                    patch="attempts/0003-improved-not-kept.patch"))
        if n == 5:
            store.append(new_record("commit", attempt=5, commit="b" * 40, previous="a" * 40,
                                    metrics=dict.fromkeys(CLASSES, 99.0), gpu_us=round(d.gpu_candidate_us, 1),
                                    code="confirmed"))
    assert [decisions[n].outcome for n in (1, 2, 3, 5)] == ["tie", "regressed", "improved", "improved"]
    return store.ledger(), decisions


def _cells(page: str, attempt: int, cls: str) -> dict[str, str]:
    """data-k -> the cell's text of the class-gpu-table row of (attempt, class)."""
    row = re.search(rf'<tr class="class-gpu[^"]*" data-attempt="{attempt}" data-class="{re.escape(cls)}"[^>]*>(.*?)</tr>',
                    page)
    assert row, (attempt, cls)
    return {k: re.sub(r"<[^>]+>", "", v) for k, v in re.findall(r'data-k="([a-z_]+)">(.*?)</td>', row.group(1))}


def test_the_per_class_table_shows_gpu_time_of_target_and_whole_operation(liger):
    events, decisions = liger
    page = render_report(events, {}, metric="ms")
    for n in (1, 2, 3, 5):
        for u in decisions[n].units:  # one harness unit per class here: the class's figures are the unit's
            cells = _cells(page, n, u.cls)
            best, op_best = (u.best_before_us + u.best_after_us) / 2, (u.op_best_before_us + u.op_best_after_us) / 2
            assert cells["best_us"] == f"{best:.4g}" and cells["candidate_us"] == f"{u.candidate_us:.4g}"
            assert cells["gain_pct"] == f"{u.gain_pct:+.2f}%" and cells["ratio_x"] == f"{best / u.candidate_us:.3f}x"
            assert cells["op_best_us"] == f"{op_best:.4g}" and cells["op_candidate_us"] == f"{u.op_candidate_us:.4g}"
            assert cells["op_gain_pct"] == f"{u.op_gain_pct:+.2f}%"
            assert cells["op_ratio_x"] == f"{op_best / u.op_candidate_us:.3f}x"
    # the regressed candidate (the forward kernel launched twice) reads 2x slower in its forward classes
    fwd = _cells(page, 2, "forward T=8192")
    assert -101 < float(fwd["gain_pct"].rstrip("%")) < -99 and fwd["ratio_x"] == "0.500x"
    # the comment-only candidate: the script metric is the screen beside GPU time, not the decider
    assert _cells(page, 1, "forward T=1024")["script_pct"] == "-190.00%"
    assert "script metric (screen)" in page and 'id="chart-gpu-classes"' in page
    assert page.index('id="chart-gpu-classes"') < page.index('id="chart-progress"')


def test_the_class_chart_plots_target_and_whole_operation_per_attempt(liger):
    events, decisions = liger
    d = class_gpu_data(events, charts.refusals(events))
    assert d.classes == CLASSES
    pts = d.points["full T=8192"]
    assert [p.attempt for p in pts] == [1, 2, 3, 5]
    u = next(x for x in decisions[5].units if x.cls == "full T=8192")
    assert pts[-1].figures.target.candidate_us == u.candidate_us and pts[-1].figures.op.candidate_us == u.op_candidate_us
    assert pts[-1].figures.target.gain_pct == pytest.approx(u.gain_pct, abs=1e-9)
    assert [p.verdict for p in pts] == ["tie", "regressed", "improved, not committed: no_longer_better", "improved"]
    png = class_gpu_chart(events)
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"


def test_several_units_of_one_class_are_summed(liger):
    """A harness timing each class in several windows: the four sequence lengths of each mode as one class."""
    _events, decisions = liger
    d = decisions[3]
    merged = d.model_copy(update={"units": [u.model_copy(update={"cls": u.cls.split()[0]}) for u in d.units]})
    rec = new_record("attempt", attempt=3, verdict="improved", code=str(d.code), gpu=merged.model_dump())
    page = render_report([rec], {})
    back = [u for u in d.units if u.cls.startswith("backward")]
    best, cand = sum((u.best_before_us + u.best_after_us) / 2 for u in back), sum(u.candidate_us for u in back)
    op_cand = sum(u.op_candidate_us for u in back)
    cells = _cells(page, 3, "backward")
    assert 'data-units="4"' in page and cells["candidate_us"] == f"{cand:.4g}" and cells["best_us"] == f"{best:.4g}"
    assert cells["gain_pct"] == f"{(1 - cand / best) * 100:+.2f}%" and cells["op_candidate_us"] == f"{op_cand:.4g}"


def test_a_refused_commit_is_shown_refused_and_best_does_not_move(liger):
    events, decisions = liger
    page = render_report(events, {}, metric="ms")
    row = re.search(r'<tr class="attempt" data-attempt="3" data-verdict="improved" data-refused="([a-z_]+)">(.*?)</tr>',
                    page)
    assert row and row.group(1) == "no_longer_better" and "improved, not committed: no_longer_better" in row.group(2)
    assert 'data-attempt="5" data-verdict="improved">' in page  # the committed one carries no refusal
    cards = {k: int(v) for v, k in re.findall(r'data-card="[^"]+"><b>(\d+)</b><span>([^<]+)</span>', page)}
    assert cards["improved"] == 1 and cards["improved, not committed"] == 1 and cards["kept commits"] == 1
    assert re.search(r'<tr class="refused" data-attempt="3" data-code="no_longer_better">', page)
    # the charts' data: BEST steps only at the baseline and the commit of attempt 5
    d = charts.progress_data(events)
    assert d.commits == [5] and {k: [s[0] for s in v] for k, v in d.best.items()} == {key: [0, 5] for key in CLASSES}
    assert [(m.attempt, m.refused) for m in d.marks] == [(1, None), (2, None), (3, "no_longer_better"), (5, None)]
    s = gpu_series(events)
    assert s.best == [(0, round(decisions[1].gpu_best_us, 1)), (5, round(decisions[5].gpu_candidate_us, 1))]
    assert [v for _, _, v in s.candidates] == ["tie", "regressed", "improved, not committed: no_longer_better",
                                               "improved"]
    plot = progress_plot(events, "ms", False)
    assert plot.verdicts == {"tie": 1, "regressed": 1, "improved, not committed: no_longer_better": 1, "improved": 1}
    assert plot.commits == 1


def test_a_later_commit_of_the_same_attempt_is_a_keep():
    events = [new_record("attempt", attempt=1, verdict="improved"),
              new_record("commit_refused", attempt=1, code="tampered", reason="x"),
              new_record("commit", attempt=1, commit="c" * 40, metrics={"n=1": 5.0})]
    assert charts.refusals(events) == {}
    assert charts.refusals(events[:2]) == {1: "tampered"}
    assert charts.refusals([{"event": "commit_refused", "attempt": 2, "reason": "old record"}]) == {2: "refused"}
    measured = new_record("attempt", attempt=1, verdict="improved",
                          classes=[{"key": "n=1", "best": 10.0, "candidate": 5.0, "deltas_pct": [50.0], "mean_pct": 50.0}])
    assert charts.last_verdict_data([measured, events[1]]).verdict == "improved, not committed: tampered"
    assert charts.last_verdict_data([measured, *events[1:]]).verdict == "improved"


def test_the_whole_operation_divergent_classes_are_marked():
    """Liger's backward at 4 programs per SM (4 x H200): target +18.4%, the small-T backward and full classes'
    whole operation -24.2/-8.2/-24.8/-3.5%."""
    runs = _runs("h200x4_liger_moved_work")
    spreads = [unit_spread_pct(runs[a], runs[b], TARGET) for a, b in itertools.pairwise(BASE)]
    spreads.append(unit_spread_pct(runs["0001-best-1"], runs["0001-best-2"], TARGET))
    d = _judge(runs, 2, spreads)
    assert d.outcome == "divergent"
    page = render_report([_attempt(2, d)], {})
    worse = re.findall(r'<tr class="class-gpu op-worse" data-attempt="2" data-class="([^"]+)"', page)
    assert worse == d.divergent_classes and len(worse) == 4
    for u in d.units:
        cells = _cells(page, 2, u.cls)
        assert cells["gain_pct"] == f"{u.gain_pct:+.2f}%" and cells["op_gain_pct"] == f"{u.op_gain_pct:+.2f}%"
    assert sorted(round(u.op_gain_pct, 1) for u in d.units if u.op_significant_loss) == [-24.8, -24.2, -8.2, -3.5]


def test_records_without_units_keep_the_script_metric_view():
    """A recorded CPU session (the script metric decided): no GPU class table, no 'screen' label."""
    path = Path(__file__).resolve().parents[1] / "fixtures" / "ledgers" / "2026-11-23-demo-cpu-workspace-layout.jsonl"
    events = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    page = render_report(events, {}, metric="us_per_call")
    assert 'id="class-gpu-table"' not in page and "script metric (screen)" not in page
    assert 'id="chart-gpu-classes"' not in page and class_gpu_chart(events) is None
    attempts = [e for e in as_events(events) if getattr(e, "event", "") == "attempt" and e.classes]
    assert attempts
    for a in attempts:
        for c in a.classes:
            assert f"{c.key}: " in page
