"""The note on a keep's performance.md rows (referee/report.py keep_note): what kept it and both
deltas of its target, never the commit's one-round decision reason (which reads `tie` for a keep)."""

from __future__ import annotations

from kopt_mcp.referee.report import keep_note
from kopt_mcp.session import PendingImprovement


def _pending(**kw) -> PendingImprovement:
    base = dict(attempt=3, tree="t", target="n=1", hypothesis="h", candidate_metrics={"n=1": 88.0},
                candidate_gpu_us=None, kernels=["k"], target_delta_pct=11.8, metric_used="script metric")
    return PendingImprovement(**{**base, **kw})


def test_a_script_metric_keep_names_both_deltas():
    assert keep_note(_pending(), "fuse", 11.2, None) == (
        "attempt 3: fuse (kept on script metric; n=1 +11.80% at the verdict, +11.20% re-measured at commit)")


def test_a_gpu_time_keep_names_its_gpu_time_change():
    p = _pending(metric_used="profiler GPU time", candidate_gpu_us=88.0, gpu_best_us=100.0)
    note = keep_note(p, "fuse", 11.2, 90.0)  # the commit's own GPU time (re-profiled tree): 90 us vs BEST 100 us
    assert "kept on profiler GPU time, -10.0% GPU time;" in note and "tie" not in note


def test_the_verdict_delta_is_the_one_the_verdict_showed():
    """The verdict's mean is the geometric mean ratio's change (+74.23% for rounds of +69.7% and +78.1%),
    not the arithmetic mean of the rounds (+73.90%): performance.md shows the verdict's number."""
    import math

    from kopt_mcp.session import VerdictSummary

    geo = 100 * (1 - math.sqrt((1 - 0.697) * (1 - 0.781)))
    p = _pending(target_delta_pct=73.9, verdict=VerdictSummary(rounds=2, target_pct=geo))
    assert f"n=1 {geo:+.2f}% at the verdict" in keep_note(p, "fuse", 72.0, None) and f"{geo:+.2f}" == "+74.24"


def test_a_keep_that_stood_says_it_was_not_re_measured_and_gives_the_confirmations_figure():
    """On the H200 (2026-12-02, Triton demo) a verdict that stood (rules/commit.py verdict_stands) was
    written "+0.00% re-measured at commit" though nothing re-measured it in process; ncu had confirmed
    +16.67% out of process."""
    p = _pending(metric_used="profiler GPU time", candidate_gpu_us=6949.6, gpu_best_us=8438.7)
    note = keep_note(p, "warps", None, 6949.6, "ncu out of process +16.67%")
    assert note.endswith("at the verdict, not re-measured in process at commit, confirmed by ncu out of "
                         "process +16.67%)")
    assert "re-measured at commit" not in note.replace("not re-measured in process at commit", "")
