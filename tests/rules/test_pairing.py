"""Launch-group pairing (kopt_mcp/rules/pairing.py `match_groups`) and its effect on the keep metric.

Which candidate group is compared with which BEST group: by launch shape, in launch order where
the candidate changed shapes (a changed grid can equal another config's old one) or renamed a
kernel, and a launch shape visited again after others split into its runs. Traces are the
recorded H100 CUPTI trace replayed as a do_bench-like harness (tests/rules/conftest.py `runs`)
or launch groups built on triton-kernels' RMSNorm backward shapes. The cheats on launch-order
pairing are written here too. Nothing is timed on the CPU.
"""

from __future__ import annotations

import pytest

from kopt_mcp.evidence.groups import target_groups
from kopt_mcp.evidence.trace import trace_groups
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.keep import judge_groups
from kopt_mcp.rules.pairing import match_groups
from tests.rules.conftest import LARGE, SMALL, bwd_groups, configs, flaggems_like


def test_changed_grid_is_paired_in_launch_order_and_said(runs):
    cand = configs(0.97, 0.97)
    cand[0]["grid"] = (256, 1, 1)
    v = judge_groups(runs(configs()), runs(cand), runs(configs()), classes=["M=128", "M=512"])
    # paired in launch order: no group left over on either side (an unpaired BEST group is skipped work)
    assert v.kept and v.code == Code.GPU_TIME_WIN and not v.unmatched_candidate and not v.unmatched_best
    # the candidate's grid 256 matches no class: its GPU time per class follows BEST's pairing
    by_pair = {d.group.split("grid=")[1].split(" ")[0]: d.candidate_median_us for d in v.groups}
    assert v.class_gpu_us is not None and len(by_pair) == 2
    assert v.class_gpu_us == pytest.approx({"M=128": by_pair["(128,1,1)"], "M=512": by_pair["(512,1,1)"]})


def test_renamed_kernel_within_the_regex_is_paired_in_launch_order(runs):
    v = judge_groups(runs(configs()), runs(configs(0.97, 0.97, name="my_sgemm_v2")), runs(configs()),
                     kernel_regex="sgemm")
    assert v.kept and v.code == Code.GPU_TIME_WIN and not v.unmatched_candidate and not v.unmatched_best
    assert [g.gain_pct for g in v.groups] == [pytest.approx(3.0, abs=1.0)] * 2


def test_renamed_kernel_without_a_regex_is_not_kept(runs):
    """The target is then BEST's kernel by name, as in the totals rule (tests/referee/test_keep_metric.py)."""
    v = judge_groups(runs(configs()), runs(configs(0.5, 0.5, name="my_sgemm_v2")), runs(configs()))
    assert not v.kept and v.code == Code.GPU_TIME_MISSING and v.gpu_best_us is None
    assert "my_sgemm_v2" in v.reason  # the text is the product: the kernels seen, so the regex can be fixed


def test_match_groups_reports_unmatched_both_ways(runs):
    a = target_groups(trace_groups(runs(configs())), None)
    b = target_groups(trace_groups(runs(configs()[:1] + [{"grid": (7, 7, 1), "scale": 1.0, "calls": 5}])), None)
    b += target_groups(trace_groups(runs([{"grid": (9, 1, 1), "scale": 1.0, "calls": 5}])), None)
    pairs, miss_b, extra_c, _ = match_groups(a, b)
    assert [p[0].grid for p in pairs] == [SMALL] and [g.grid for g in miss_b] == [LARGE]
    assert sorted(g.grid for g in extra_c) == [(7, 7, 1), (9, 1, 1)]


def test_one_launch_shape_visited_twice_is_two_runs_and_a_new_block_pairs_with_its_run(runs):
    best_before, best_after = runs(flaggems_like()), runs(flaggems_like())
    candidate = runs(flaggems_like(long_scale=0.25, long_block=(1024, 1, 1)))
    labels = [g.label() for g in target_groups(trace_groups(best_before), None)]
    assert sum("grid=(1024,1,1)" in x for x in labels) == 2 and any(x.endswith("run 2") for x in labels)
    d = judge_groups(best_before, candidate, best_after)
    assert d.kept, d.reason
    [long] = [g for g in d.groups if g.group.endswith("run 2")]
    assert long.gain_pct > 70  # 4x faster per launch, paired with BEST's second visit of grid 1024
    assert d.gpu_delta_pct > 10  # weighted by BEST's time share
    assert not d.unmatched_candidate and not d.unmatched_best and d.code == Code.GPU_TIME_WIN


def test_a_visited_twice_shape_that_did_not_change_is_a_tie(runs):
    d = judge_groups(runs(flaggems_like()), runs(flaggems_like()), runs(flaggems_like()))
    assert not d.kept and abs(d.gpu_delta_pct) < 2.0


def test_a_fake_fast_visit_inserted_before_the_real_ones_is_not_kept(runs):
    """The cheat on runs: launch the kernel a few times with the shared grid and an early return before
    the real visits, so that run 1 of BEST (real) pairs with a near-empty run 1 of the candidate."""
    fake = dict(grid=(1024, 1, 1), scale=0.01, calls=(5, 8), warmup=0)
    best = [runs(flaggems_like()), runs(flaggems_like())]
    cheat = runs([fake] + flaggems_like())  # its own run: another shape comes before the real visits
    assert [g.run for g in target_groups(trace_groups(cheat), None) if g.grid == (1024, 1, 1)] == [0, 1, 2]
    d = judge_groups(best[0], cheat, best[1])
    assert not d.kept, d.reason


def test_a_changed_grid_that_equals_another_configs_old_grid_is_paired_by_launch_order():
    # 8 rows per program: at seq_len 2048 and 4096 the candidate's grid is BEST's at 256 and 512.
    # Pairing those by shape compared 2048 with 256 (the 2026-11-24 tk `win`, judged -0.98%)
    seq_lens = list(range(256, 4097, 256))
    best = bwd_groups(seq_lens, 1, 1.0)
    cand = bwd_groups(seq_lens, 8, 0.9)
    assert {g.shape for g in best} & {g.shape for g in cand}  # the collision is there
    pairs, miss_b, extra_c, notes = match_groups(best, cand)
    assert not miss_b and not extra_c and [b.grid[0] // 96 for b, _ in pairs] == [c.grid[0] * 8 // 96 for _, c in pairs]
    assert notes == ["16 group(s) of _rms_norm_bwd grid=(24576,1,1) block=(128,1,1) changed launch shape: paired in launch order"]
    d = judge_groups(best, cand, bwd_groups(seq_lens, 1, 1.0), "_rms_norm_bwd")
    assert d.kept and d.gpu_delta_pct == pytest.approx(10.0, abs=0.01), d.reason


def test_a_candidate_with_the_same_shapes_is_still_paired_by_shape():
    seq_lens = [256, 512, 768]
    best = bwd_groups(seq_lens, 1, 1.0)
    cand = list(reversed(bwd_groups(seq_lens, 1, 1.0)))  # listed in another order: shapes decide
    pairs, _, _, notes = match_groups(best, cand)
    assert all(b.shape == c.shape for b, c in pairs) and not notes


def test_a_config_computed_once_then_replaced_by_a_no_op_of_another_shape_is_skipped_work():
    # the cheat on launch-order pairing, written first: the candidate launches seq_len 768's real kernel
    # once, caches its result, and launches a near-empty kernel of a new grid for the other calls. Had
    # the no-op group paired with BEST's 768 group in launch order, its tiny median would look like a win.
    from kopt_mcp.evidence.groups import LaunchGroup

    best = bwd_groups([256, 512, 768], 1, 1.0)
    real_once = bwd_groups([768], 1, 1.0, calls=1)[0].model_copy(update={"first_order": 2.0})
    no_op = LaunchGroup(kernel="_rms_norm_bwd", grid=(1, 1, 1), block=(128, 1, 1), calls=299, total_us=299 * 0.5,
                        median_us=0.5, first_order=2.5, durations_us=[0.5] * 299)
    cand = [*bwd_groups([256, 512], 1, 1.0), real_once, no_op]
    d = judge_groups(best, cand, bwd_groups([256, 512, 768], 1, 1.0), "_rms_norm_bwd")
    assert not d.kept and d.code == Code.SKIPPED_WORK, d.reason
