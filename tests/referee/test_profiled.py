"""save_and_test where every run is profiled (referee/profiled.py): BEST, the candidate, BEST again,
the script metric read from the same runs, GPU time by harness unit deciding both ways. Traces are
planted format-3 files (tests/replay_units.py) read by the real parser."""

from __future__ import annotations

import pytest

from kopt_mcp.testing.toy import set_kernel
from tests.conftest import BASE_TIMES
from tests.replay_units import ReplayUnits

UNITS = {"1": 10.0, "2": 20.0}


@pytest.fixture
def units_ref(replayed_ref):
    """A Referee on the toy repo whose profiler writes planted harness units; baseline taken."""
    return lambda **flags: replayed_ref(ReplayUnits, UNIT_US=UNITS, **flags)


def _runs(v) -> list[str]:
    return [d.rsplit("/", 1)[-1].split("-", 1)[1] for d in v.run_dirs]


def test_an_identical_candidate_is_a_tie_in_three_runs(units_ref):
    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US=UNITS, COMMENT="same code")
    v = r.save_and_test("global", "a comment")
    assert v.verdict == "tie" and v.code in ("gpu_time_below_floor", "gpu_time_not_improved"), v.reason
    assert _runs(v) == ["best-1", "candidate-1", "best-2"]
    assert abs(v.gpu_delta_pct) < 0.5


def test_a_gpu_win_is_improved_in_three_runs_though_the_script_metric_did_not_move(units_ref):
    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": 9.0, "2": 18.0}, CODE="v2")
    v = r.save_and_test("global", "10% faster kernel")
    assert v.verdict == "improved" and v.code == "gpu_time_win", v.reason
    assert v.gpu_delta_pct == pytest.approx(10.0, abs=0.5)
    assert _runs(v) == ["best-1", "candidate-1", "best-2"]


def test_a_gpu_loss_is_regressed_though_the_script_metric_is_noise(units_ref):
    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": 10.5, "2": 21.0}, CODE="v2")
    v = r.save_and_test("global", "5% slower kernel")
    assert v.verdict == "regressed" and v.code == "gpu_time_loss", v.reason
    assert v.gpu_delta_pct == pytest.approx(-5.0, abs=0.5)
    assert v.consecutive_regressions == 1


def test_work_moved_out_of_the_target_kernels_is_not_a_win(units_ref):
    # the target gets 2 us faster per invocation, the torch reduction 4 us slower: the operation lost
    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": 8.0, "2": 18.0}, OTHER_US={"1": 5.0, "2": 5.0}, CODE="v2")
    v = r.save_and_test("global", "moved the reduction out")
    assert v.verdict == "regressed" and v.code == "other_kernel_grew", v.reason
    assert "torch_sum" in v.reason  # the text is the product: it names the kernel that grew


def test_results_cached_across_calls_are_skipped_work(units_ref):
    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": 1.0, "2": 2.0}, EMPTY_SHARE=0.9, CODE="v2")
    v = r.save_and_test("global", "memoized")
    assert v.verdict == "tie" and v.code == "skipped_work", v.reason


def test_a_win_with_unchanged_compiled_code_needs_the_out_of_process_confirmation(units_ref):
    # same cubin, same launches, 10% less GPU time: not improved without ncu's confirmation (none here)
    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": 9.0, "2": 18.0})
    v = r.save_and_test("global", "host-side change only")
    assert v.verdict == "tie" and v.code == "compiled_code_unchanged", v.reason


def test_rejudge_decides_a_recorded_attempt_again_from_its_run_folders(units_ref, capsys):
    import json

    from kopt_mcp.app.cli import main

    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": 10.5, "2": 21.0}, CODE="v2")
    v = r.save_and_test("global", "5% slower kernel")
    assert main(["rejudge", str(r.where.state_dir), "--attempt", str(v.attempt), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recorded_verdict"] == "regressed" and out["verdict"] == "regressed" and out["code"] == "gpu_time_loss"
    assert out["gpu_delta_pct"] == pytest.approx(v.gpu_delta_pct, abs=1e-6)
    assert out["units"] == "marked" and [c["cls"] for c in out["classes"]] == ["n=1", "n=2"]
    assert len(out["recent_spreads_pct"]) == 3  # the baseline's four adjacent profiles
    assert main(["rejudge", str(r.where.state_dir), "--attempt", "99"]) == 2
