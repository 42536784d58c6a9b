"""The launch-group keep metric (kopt_mcp/rules/keep.py) on replayed CUPTI traces.

The traces are the recorded H100 trace (tests/fixtures/cupti/h100_torch_matmul/cupti-438.json)
replayed as a time-driven harness by tests/replay_cupti.py `dobench_doc`: the recorded kernel
names, registers, shared memory and block, per-launch times drawn within the recording's min/max,
launch counts drawn per process as triton.testing.do_bench's repetition count varies, written in the
injector's format 2 and read by the real parser (`runs`, tests/rules/conftest.py). rocprofv3
tests use the recorded kernel traces. Pairing BEST's groups with the candidate's: test_pairing.py.
Planted effects are large against the replay's noise; no verdict here can be flipped by CPU load
(nothing is timed on the CPU).
"""

from __future__ import annotations

import itertools
import statistics
from pathlib import Path

import pytest

from kopt_mcp.evidence.groups import target_groups
from kopt_mcp.evidence.names import is_utility_kernel
from kopt_mcp.evidence.trace import trace_groups
from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.profilers.rocprof import parse_rocprof_csv
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.keep import class_gpu_times, group_spread_pct, judge_groups, target_median_us
from tests.replay_cupti import FIXTURE
from tests.rules.conftest import LARGE, SMALL, configs

ROCPROF = Path(__file__).resolve().parents[1] / "fixtures" / "rocprofv3"


def test_per_group_median_is_stable_where_totals_of_a_time_driven_harness_spread(runs):
    best = [runs(configs()) for _ in range(6)]
    sgemm_totals = [next(k.total_us for k in t.kernels if k.name.startswith("void cutlass")) for t in best]
    total_spread = (max(sgemm_totals) - min(sgemm_totals)) / statistics.mean(sgemm_totals) * 100
    spreads = [group_spread_pct(a, b) for a, b in itertools.pairwise(best)]
    assert total_spread > 15.0  # the 15-29%: a floor from totals could keep nothing
    assert max(spreads) < 0.5, spreads  # the per-group median launch hardly moves
    for t in best:
        groups = target_groups(trace_groups(t), None)
        assert [g.grid for g in groups] == [SMALL, LARGE]


def test_input_generation_kernel_is_never_the_target_even_when_hottest(runs):
    from kopt_mcp.evidence.trace import target_gpu_time

    t = runs(configs(), utility_calls=24000)
    assert is_utility_kernel(t.kernels[0].name)  # the recorded torch randn kernel, replayed hottest
    assert [g.kernel.startswith("void cutlass") for g in target_groups(trace_groups(t), None)] == [True, True]
    assert target_gpu_time(t, None)[1] == [t.kernels[1].name]  # the totals' target too


def test_identical_candidate_is_not_kept_across_seeds(runs):
    verdicts = [judge_groups(runs(configs()), runs(configs()), runs(configs())) for _ in range(8)]
    assert not any(v.kept for v in verdicts), [v.reason for v in verdicts]
    assert {v.code for v in verdicts} <= {Code.GPU_TIME_BELOW_FLOOR, Code.GPU_TIME_NOT_IMPROVED}
    assert all(abs(v.gpu_delta_pct) < 0.5 and v.time_driven for v in verdicts)


def test_real_two_percent_win_is_kept_in_three_runs(runs):
    v = judge_groups(runs(configs()), runs(configs(0.98, 0.98)), runs(configs()), classes=["M=128", "M=512"])
    assert v.kept and v.code == Code.GPU_TIME_WIN, v.reason
    assert 1.6 < v.gpu_delta_pct < 2.4 and v.lower_bound_pct > v.floor.pct
    assert len(v.groups) == 2 and v.time_driven
    assert v.class_gpu_us["M=512"] == pytest.approx(v.groups[1].candidate_median_us)


def test_one_percent_slower_is_a_loss_beyond_the_floor(runs):
    v = judge_groups(runs(configs()), runs(configs(1.01, 1.01)), runs(configs()))
    assert not v.kept and v.gpu_delta_pct < -0.5 and v.code == Code.GPU_TIME_LOSS
    assert v.gpu_delta_pct < -v.floor.pct and v.upper_bound_pct < -0.2


def test_a_suspect_script_win_names_the_likely_timing_cheats(runs):
    """The script said faster, the GPU did the same work: the reason names what fools a timer."""
    same = [judge_groups(runs(configs()), runs(configs()), runs(configs()), suspect=s) for s in (True, False)]
    assert not same[0].kept and same[0].code == same[1].code  # `suspect` changes only the words
    # the text is the product: a suspect script win names what fools a timer, an unsuspect one does not
    assert "side stream" in same[0].reason and "missing synchronize" in same[0].reason
    assert "side stream" not in same[1].reason and "noise" in same[1].reason


def test_win_in_one_class_counts_by_bests_time_share(runs):
    v = judge_groups(runs(configs()), runs(configs(1.0, 0.9)), runs(configs()))
    large = next(g for g in v.groups if "grid=(512,1,1)" in g.group)
    assert 9.0 < large.gain_pct < 11.0
    assert v.gpu_delta_pct == pytest.approx(large.weight * large.gain_pct, abs=0.6)
    assert v.kept


def test_warm_up_launches_do_not_move_the_median(runs):
    v = judge_groups(runs(configs()), runs(configs(warmup=40)), runs(configs()))
    assert not v.kept and abs(v.gpu_delta_pct) < 0.5


def test_skipped_work_in_a_time_driven_harness_is_caught(runs):
    """Results cached across calls: the kernel runs a few times only, faster-looking, while a
    time-driven harness would launch a really faster kernel more often."""
    v = judge_groups(runs(configs()), runs(configs(0.95, 0.95, calls=((8, 8), (3, 3)), warmup=0)), runs(configs()))
    assert not v.kept and v.code == Code.SKIPPED_WORK and v.time_driven
    assert [g.candidate_calls for g in v.groups] == [8, 3]


def test_fewer_launches_than_best_in_a_fixed_count_harness_is_caught(runs):
    fixed = ((100, 100), (30, 30))
    v = judge_groups(runs(configs(calls=fixed)), runs(configs(0.9, 0.9, calls=((100, 100), (29, 29)))),
                     runs(configs(calls=fixed)))
    assert not v.time_driven and not v.kept and v.code == Code.SKIPPED_WORK
    assert [(g.best_calls, g.candidate_calls) for g in v.groups] == [([100, 100], 100), ([30, 30], 29)]


def test_a_missing_best_group_is_skipped_work(runs):
    v = judge_groups(runs(configs()), runs(configs(0.9, 0.9)[:1]), runs(configs()))
    assert not v.kept and v.code == Code.SKIPPED_WORK and v.unmatched_best and "512" in v.unmatched_best[0]


def test_extra_work_in_a_new_group_is_charged(runs):
    """A split kernel: 5% faster main launches, plus a new launch shape of the same kernel that
    costs more than the win. Not matched to any BEST group: its time is added."""
    cand = configs(0.95, 0.95) + [{"grid": (1, 1, 1), "scale": 1.0, "calls": (250, 250), "warmup": 0}]
    v = judge_groups(runs(configs()), runs(cand), runs(configs()))
    assert v.unmatched_candidate and "(1,1,1)" in v.unmatched_candidate[0]
    assert not v.kept and v.gpu_delta_pct < -v.floor.pct and v.code == Code.GPU_TIME_LOSS


def test_process_shift_of_best_raises_the_floor(runs):
    v = judge_groups(runs(configs()), runs(configs(0.995, 0.995)), runs(configs(), shift_pct=1.5))
    assert v.spread_pct > 1.0 and v.floor.pct >= 2 * v.spread_pct - 1e-9 and not v.kept
    assert v.code == Code.GPU_TIME_BELOW_FLOOR and 0 < v.gpu_delta_pct < v.floor.pct


def test_recorded_format_1_trace_parses_as_one_group_per_kernel_and_is_not_judged(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / FIXTURE.name).write_text(FIXTURE.read_text())
    t = parse_cupti_dir(d)
    groups = {g.kernel[:14]: g for g in t.groups}
    sgemm = next(g for g in t.groups if "cutlass" in g.kernel)
    assert sgemm.calls == 20 and sgemm.grid is None and sgemm.median_us is None and len(groups) == 2
    v = judge_groups(t, t, t)
    assert not v.kept and v.code == Code.GPU_TIME_MISSING and v.floor is None


def test_class_gpu_times_by_grid_dimension_and_by_order(runs):
    t = runs(configs())
    by_grid = class_gpu_times(t, ["M=512,dtype=fp32", "M=128,dtype=fp32"])
    assert list(by_grid) == ["M=512,dtype=fp32", "M=128,dtype=fp32"]
    assert by_grid["M=512,dtype=fp32"] == pytest.approx(4 * by_grid["M=128,dtype=fp32"], rel=0.02)
    by_order = class_gpu_times(t, ["size=small", "size=large"])
    assert by_order["size=large"] > 3 * by_order["size=small"] > 900
    assert class_gpu_times(t, ["a=1", "a=2", "a=3"]) is None  # 2 groups, 3 classes: no honest mapping
    assert class_gpu_times(t, ["all"]) == {"all": pytest.approx(sum(by_order.values()))}
    us, names = target_median_us(t, None)
    assert us == pytest.approx(sum(by_order.values())) and len(names) == 1 and "cutlass" in names[0]


def _rocprof_rows(keep_row):
    text = (ROCPROF / "rocprofiler_sdk_docs_kernel_trace.csv").read_text().splitlines()
    return "\n".join([text[0]] + [r for r in text[1:] if keep_row(r)]) + "\n"


def test_rocprofv3_per_dispatch_times_feed_the_same_rule(tmp_path):
    t = parse_rocprof_csv(ROCPROF / "rocprofiler_sdk_docs_kernel_trace.csv")
    assert t.groups and all(g.durations_us and g.grid == (16, 1024, 1) and g.block == (64, 1, 1) for g in t.groups)
    add = next(k for k in t.kernels if k.name.startswith("void addition_kernel"))
    assert add.durations_us and add.median_us == pytest.approx(statistics.median(add.durations_us))
    same = judge_groups(t, t, t, kernel_regex="kernel")
    assert not same.kept and same.gpu_delta_pct == pytest.approx(0.0) and same.spread_pct == 0.0
    assert same.code in (Code.GPU_TIME_BELOW_FLOOR, Code.GPU_TIME_NOT_IMPROVED)  # judged, not skipped or missing
    path = tmp_path / "kernel_trace.csv"
    path.write_text(_rocprof_rows(lambda r: "divide_kernel" not in r))  # a candidate without the divide dispatches
    v = judge_groups(t, parse_rocprof_csv(path), t, kernel_regex="kernel")
    assert not v.kept and v.code == Code.SKIPPED_WORK
    assert v.unmatched_best and all(g.startswith("divide_kernel") for g in v.unmatched_best)


def test_kernel_stats_layout_has_no_groups_and_trace_groups_falls_back_per_kernel():
    t = parse_rocprof_csv(ROCPROF / "hpctraining_jacobi_hip_kernel_stats.csv")
    assert t.groups is None
    groups = trace_groups(t)
    assert [g.kernel for g in groups] == [k.name for k in t.kernels] and all(g.median_us is None for g in groups)


def test_old_keep_metric_signature_still_works():
    from kopt_mcp.rules.keep_totals import apply_keep_metric

    assert apply_keep_metric(100.0, 90.0, ["k"], 10, 10).kept
    assert not apply_keep_metric(100.0, 90.0, ["k"], 10, 9).kept



def test_performance_rows_show_gpu_time_per_class(runs):
    from kopt_mcp.referee.report import perf_rows

    t = runs(configs())
    per_class = class_gpu_times(t, ["M=128", "M=512"])
    rows = perf_rows("baseline", "abc1234", "python bench.py", "global", ["sgemm"], {"M=128": 1.0, "M=512": 4.0},
                     999.0, None, "baseline", class_gpu_us=per_class)
    cells = [float(r.gpu_time) for r in rows]
    assert cells[0] == pytest.approx(per_class["M=128"], rel=1e-3) and cells[1] > 3 * cells[0]
    plain = perf_rows("baseline", "abc1234", "python bench.py", "global", ["sgemm"], {"M=128": 1.0}, 999.0, None, "b")
    assert float(plain[0].gpu_time) == 999.0


def test_why_not_kept_says_which_way_the_gpu_time_moved(runs):
    """A GPU gain under the floor is not called a disagreement; a GPU loss under a non-suspect script
    gain points outside the target kernels (triton-kernels' win on the H100, 2026-11-24: +16% by the
    script, the gain in torch's sum over dW, the target kernels 0.98% slower)."""
    b1, b2 = runs(configs()), runs(configs(), shift_pct=1.5)  # BEST's own profiles 1.5% apart
    small = judge_groups(b1, runs(configs(small=0.995, large=0.995)), b2, suspect=True)
    assert not small.kept and small.code == Code.GPU_TIME_BELOW_FLOOR
    assert 0 < small.lower_bound_pct and small.gpu_delta_pct < small.floor.pct  # significant, under the floor
    slower = judge_groups(b1, runs(configs(small=1.01, large=1.01)), b2, suspect=False)  # within the floor
    assert not slower.kept and slower.code == Code.GPU_TIME_NOT_IMPROVED and -slower.floor.pct < slower.gpu_delta_pct < 0
    denied = judge_groups(b1, runs(configs(small=1.01, large=1.01)), b2, suspect=True)
    assert denied.code == Code.GPU_TIME_NOT_IMPROVED
    lost = judge_groups(runs(configs()), runs(configs(small=1.2, large=1.2)), runs(configs()), suspect=True)
    assert lost.code == Code.GPU_TIME_LOSS and lost.gpu_delta_pct < -10 and lost.upper_bound_pct < -10
    # `suspect` changes only the words: the text is the product, it points outside the target or at the timing
    assert "outside [profiler] kernel" in slower.reason and "disagree" in denied.reason


def test_launch_counts_differ_between_do_bench_runs_not_between_fixed_count_runs(runs):
    from kopt_mcp.rules.keep import launch_counts_differ

    a, b = runs(configs()), runs(configs())  # do_bench: counts drawn per process
    assert launch_counts_differ(a, b)
    fixed = configs(calls=((300, 300), (80, 80)))
    assert not launch_counts_differ(runs(fixed), runs(fixed))
