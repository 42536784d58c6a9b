"""Runs of a launch group (kopt_mcp/evidence/groups.split_runs) and the CUPTI aggregator's cap per
run (kopt_mcp/profilers/cupti_inject/kopt_cupti_trace.py): a harness that visits its shapes one
after another comes back to a (kernel, grid, block) it launched before (FlagGems' rms_norm on the
H100, 2026-11-24: 1024x1024 and 1024x65536 rows, both grid 1024 at 128 threads)."""

from __future__ import annotations

import sys

from kopt_mcp.evidence.groups import MAX_RUNS, MIN_RUN_LAUNCHES, build_groups
from kopt_mcp.profilers.cupti import INJECT_DIR

K = "rms_norm_kernel"
SHORT, LONG = (1024, 1, 1), (4096, 1, 1)
BLOCK = (128, 1, 1)


def launches(plan):
    """build_groups records for `plan`: (grid, count, us per launch) visited in order."""
    out, t = [], 0
    for grid, count, us in plan:
        for _ in range(count):
            out.append((K, grid, BLOCK, t, us, 32, 0))
            t += 1
    return out


def test_a_shape_visited_again_later_is_split_into_its_runs():
    groups = build_groups(launches([(SHORT, 500, 5.0), (LONG, 40, 20.0), (SHORT, 30, 580.0)]))
    assert [(g.grid, g.run, g.calls, g.median_us) for g in groups] == [
        (SHORT, 0, 500, 5.0), (LONG, 0, 40, 20.0), (SHORT, 1, 30, 580.0)]
    assert groups[2].label().endswith("run 2") and groups[0].shape != groups[2].shape


def test_shapes_taking_turns_launch_by_launch_stay_one_group_each():
    plan = [(SHORT, 1, 5.0), (LONG, 1, 20.0)] * (MAX_RUNS + 1)
    groups = build_groups(launches(plan))
    assert [(g.grid, g.run, g.calls) for g in groups] == [(SHORT, 0, MAX_RUNS + 1), (LONG, 0, MAX_RUNS + 1)]


def test_a_few_steps_launching_each_shape_once_stay_one_group_each():
    """A fixed-count loop of 5 steps, each launching both shapes once: 5 runs per shape, each of one
    launch, is no visiting harness: splitting would leave groups of one launch (no median worth the name)."""
    plan = [(SHORT, 1, 5.0), (LONG, 1, 20.0)] * 5
    groups = build_groups(launches(plan))
    assert [(g.grid, g.run, g.calls) for g in groups] == [(SHORT, 0, 5), (LONG, 0, 5)]
    visits = [(SHORT, MIN_RUN_LAUNCHES, 5.0), (LONG, MIN_RUN_LAUNCHES, 20.0)] * 2
    assert [(g.grid, g.run) for g in build_groups(launches(visits))] == [(SHORT, 0), (LONG, 0), (SHORT, 1), (LONG, 1)]


def test_the_injector_keeps_launches_of_every_run_not_only_the_first_cap():
    sys.path.insert(0, str(INJECT_DIR))
    try:
        import kopt_cupti_trace as agg
    finally:
        sys.path.remove(str(INJECT_DIR))
    trace, t = agg.Trace(), 0
    for grid, count in ((SHORT, agg.MAX_DURATIONS + 500), (LONG, 10), (SHORT, 30)):
        for _ in range(count):
            trace.add_row([K, t, t + 1000, list(grid), list(BLOCK), 32, 0])
            t += 2000
    doc = trace.doc(pid=1, argv=[])
    short = next(g for g in doc["kernels"][K]["groups"] if tuple(g["grid"]) == SHORT)
    assert short["calls"] == agg.MAX_DURATIONS + 530
    assert len(short["durations_ns"]) == agg.MAX_DURATIONS + 30  # the first run capped, the second kept
    assert not any(k.startswith("_") for k in doc["kernels"][K]) and not any(k.startswith("_") for k in short)
