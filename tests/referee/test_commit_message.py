"""A keep's commit message (referee/report.py commit_message): the save_and_test verdict's numbers
and, labelled as such, the commit's one-round re-measure; never a verdict word other than
`improved` (the re-measure's own one-round reason said `tie`); the re-measure line names the metric
that decided the verdict and the runs it took."""

from __future__ import annotations

import re
import subprocess

import pytest

from kopt_mcp.referee.commit_measure import Remeasure
from kopt_mcp.referee.report import commit_message
from kopt_mcp.rules.decision import Code, Decision
from kopt_mcp.rules.gpu_time import GpuTimeJudgement
from kopt_mcp.rules.keep_totals import KeepDecision
from kopt_mcp.rules.script import ClassDelta, ScriptDecision
from kopt_mcp.session import PendingImprovement, VerdictSummary
from kopt_mcp.testing.toy import set_kernel

#: every verdict word but `improved` (rules/decision.py Verdict and AttemptVerdict)
NOT_KEPT = re.compile(r"\b(tie|regressed|divergent|incorrect|abandoned|failed|rejected|conflict|interrupted|"
                      r"cancelled)\b", re.IGNORECASE)


def _line(text: str, label: str) -> str:
    found = [x for x in text.splitlines() if x.startswith(label)]
    assert len(found) == 1, text
    return found[0]


def _changes(text: str) -> dict[str, float]:
    """`key +12.34%` pairs of one line's `per class` part."""
    return {k: float(v) for k, v in re.findall(r"([\w=.]+) ([+-]\d+\.\d+)%", text.split("per class", 1)[1])}


def test_a_kept_commit_carries_the_verdict_and_the_labelled_remeasure(ref):
    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 190.0})
    v = ref.save_and_test("global", "halve n=1")
    assert v.verdict == "improved"
    c = ref.commit_improvement("halve n=1")
    assert c.committed
    msg = ref.where.repo.commit(c.commit).message
    assert msg.splitlines()[0] == "halve n=1"
    assert "kopt-mcp attempt 1, target global" in msg  # what recovery.is_commit_of looks for
    verdict = _line(msg, "save_and_test verdict:")
    assert f"over {v.rounds} paired rounds" in verdict and v.rounds == 2
    assert _changes(verdict) == {x.key: round(x.mean_pct, 2) for x in v.classes}
    remeasure = _line(msg, "re-measured at commit:")
    assert "2 run(s), script metric" in remeasure  # one pair, judged with the verdict's rounds by its rule
    assert _changes(remeasure) == {x.key: round(x.mean_pct, 2) for x in c.classes}
    assert _changes(remeasure)["n=1"] == 50.0 and _changes(remeasure)["n=2"] == 5.0  # 100 -> 50, 200 -> 190 us
    assert NOT_KEPT.search(msg) is None, msg


def test_a_gpu_time_keep_names_both_gpu_times_and_the_reprofiled_ones():
    p = PendingImprovement(
        attempt=4, tree="t", target="n=1", hypothesis="h", candidate_metrics={"n=1": 58.0}, candidate_gpu_us=58.0,
        kernels=["k"], target_delta_pct=41.0, metric_used="profiler GPU time", gpu_best_us=100.0,
        verdict=VerdictSummary(rounds=1, target_pct=41.5, target_lo_pct=30.25, confidence=0.995, classes_pct={"n=1": 41.5, "n=2": -0.5},
                               gpu_best_us=100.0, gpu_candidate_us=58.0, gpu_gain_pct=42.0))
    d = ScriptDecision(outcome="tie", needs_round=False, target="n=1", target_deltas_pct=[39.0], worse_classes=[],
                       code=Code.SCRIPT_NOT_CONFIRMED,
                       reason="target n=1 changed +39.00%: not a significant win confirmed in 1 rounds: tie",
                       classes=[ClassDelta(key="n=1", best=100.0, candidate=61.0, deltas_pct=[39.0], mean_pct=39.0),
                                ClassDelta(key="n=2", best=1.0, candidate=1.0, deltas_pct=[0.0], mean_pct=0.0)])
    keep = KeepDecision(kept=True, gpu_best_us=101.0, gpu_candidate_us=60.0, gpu_delta_pct=40.59,
                        metric_used="profiler GPU time", reason="faster", code=Code.GPU_TIME_WIN)
    rm = Remeasure(decision=Decision(outcome="commit", code=Code.STILL_BETTER, reason="x"), script=d,
                   gpu=GpuTimeJudgement(keep=keep, outcome="improved"), runs=3)
    msg = commit_message("fuse", p, rm.shown("n=1"), notes=["formatted by the [format] command"])
    verdict, remeasure = _line(msg, "save_and_test verdict:"), _line(msg, "re-measured at commit:")
    assert "+41.50%" in verdict and "99.5% lower bound +30.25%" in verdict and "over 1 paired round;" in verdict
    assert "100.0 -> 58.0 us (-42.00%)" in verdict
    assert "n=1 +39.00%" in remeasure and "101.0 -> 60.0 us (+40.59%)" in remeasure and "3 profiled run(s)" in remeasure
    assert "formatted by the [format] command" in msg.splitlines()
    assert NOT_KEPT.search(msg) is None, msg  # the re-measure's own reason (`tie`) is never used


def test_recovery_still_finds_the_commit_of_an_attempt(ref):
    from kopt_mcp.referee.recovery import is_commit_of

    best = ref.books.state.best.commit
    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0})
    assert ref.save_and_test("global", "x").verdict == "improved"
    c = ref.commit_improvement("")
    ref.books.state.best.commit = best  # as a killed server's state would still say
    try:
        assert is_commit_of(ref, c.commit, 1) and not is_commit_of(ref, c.commit, 2)
    finally:
        ref.books.state.best.commit = c.commit
    title = subprocess.run(["git", "log", "-1", "--format=%s", c.commit], cwd=ref.where.workspace_path, check=True,
                           capture_output=True, text=True).stdout.strip()
    assert title == "x"  # the hypothesis is the default title


def test_performance_md_shows_the_verdicts_numbers(ref):
    """Rounds of +50% and +60% on n=1: the verdict's mean is the geometric mean ratio's change (+55.28%,
    not the rounds' arithmetic +55%); performance.md's keep row carries the same number, and each class's
    best/candidate values are the ones its mean change was computed from."""
    from kopt_mcp.rules.percent import improvement_pct

    set_kernel(ref.where.workspace_path, {"1": [50.0, 40.0], "2": 200.0})
    v = ref.save_and_test("n=1", "halve n=1")
    assert (v.verdict, v.rounds) == ("improved", 2)
    c = {x.key: x for x in v.classes}
    assert c["n=1"].mean_pct == pytest.approx(100 * (1 - (0.5 * 0.4) ** 0.5))
    for x in v.classes:
        assert improvement_pct(x.best, x.candidate, False) == pytest.approx(x.mean_pct)
    assert ref.commit_improvement("halve n=1").committed
    perf = (ref.where.workspace_path / "performance.md").read_text()
    shown = f"{c['n=1'].mean_pct:+.2f}%"
    assert shown == "+55.28%" and f"n=1 {shown} at the verdict" in perf
    row = next(x for x in perf.splitlines() if "| keep |" in x and "| n=1 (target) |" in x)
    assert f"| {shown} |" in row
