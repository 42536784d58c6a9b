"""The keep metric inside save_and_test (rules.keep_totals.apply_keep_metric / gpu_gain_floor, driven by
referee.attempt._keep_metric): BEST is profiled before and after the candidate (A/B/A) in the same
lease, the candidate is compared with their mean, their spread sets the floor; a failed or
unmatched profile is never kept. GPU times come from the recorded CUPTI trace, replayed with set
numbers (tests/replay_cupti.py)."""

from __future__ import annotations

import pytest

from kopt_mcp.testing.toy import set_kernel

FASTER = {"1": 95.0, "2": 190.0}  # the script metric: a clear 5% win on both classes


def test_baseline_records_the_spreads_of_its_four_adjacent_profiles(cupti_ref):
    r = cupti_ref([1000.0, 1002.0, 1001.0, 1001.0])
    # the keep metric's quantity: the median launch per launch group (20 launches of 1000 us in all)
    assert r.books.state.best.gpu_us == pytest.approx(50.0)
    assert r.books.state.gpu_spreads_pct == pytest.approx([2.0 / 1001.0 * 100, 1.0 / 1001.5 * 100, 0.0])


def test_a_real_gpu_win_is_kept_against_best_profiled_before_and_after(cupti_ref):
    r = cupti_ref(1000.0)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=950.0)
    v = r.save_and_test("global", "faster")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win"), v.reason
    assert v.gpu_delta_pct == pytest.approx(5.0, abs=0.01)
    assert (v.gpu_best_us, v.gpu_candidate_us) == (pytest.approx(50.0), pytest.approx(47.5))
    assert r.books.state.gpu_spreads_pct[-1] == 0.0  # BEST profiled before and after the candidate: 50.0 us both times
    labels = [d.rsplit("-", 2)[-2:] for d in v.run_dirs]
    assert ["best", "profile"] in labels and ["profile", "after"] in labels
    assert len(r.books.state.gpu_spreads_pct) == 4  # three from the baseline, one from this attempt


def test_a_jump_of_best_during_the_attempt_is_measured_once_more(cupti_ref):
    # BEST runs 1000 us before the candidate and 1010 us after it: a 1% jump within seconds. The
    # candidate's 990 us then clears the mean of 1000 and 1010 by 1.49%, not twice their spread
    # (1.99%), so the candidate and BEST are profiled once more: 1010, 990, 1010 -> kept.
    r = cupti_ref([1000.0] * 4 + [1000.0, 1010.0])
    set_kernel(r.where.workspace_path, FASTER, GPU_US=990.0)
    v = r.save_and_test("global", "across a jump")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win"), v.reason
    assert v.gpu_delta_pct == pytest.approx(100 * 20 / 1010, abs=0.001)
    assert any("moved 0.995% between its profiles" in w for w in v.warnings)
    assert sum("candidate-profile" in d for d in v.run_dirs) == 2  # 1 script round + 2 profiled = max_rounds 3


def test_a_gain_within_the_shift_between_best_profiles_is_not_kept(cupti_ref):
    # BEST keeps moving (1000, 1010, 1000 around two candidate profiles): the gain never clears the floor
    r = cupti_ref([1000.0] * 4 + [1000.0, 1010.0, 1000.0])
    set_kernel(r.where.workspace_path, FASTER, GPU_US=990.0)
    v = r.save_and_test("global", "inside the shift")
    assert (v.verdict, v.code) == ("tie", "gpu_time_below_floor"), v.reason
    assert v.gpu_floor_pct == pytest.approx(2 * 100 * 10 / 1005, abs=0.001)  # 2x this attempt's spread, 0.995%
    assert v.gpu_delta_pct == pytest.approx(1.4925, abs=0.001)  # against the mean of 1010 and 1000
    assert sum("candidate-profile" in d for d in v.run_dirs) == 2


def test_a_drift_over_minutes_does_not_raise_the_floor(cupti_ref):
    # BEST's level moved 0.8% between the baseline and this attempt, but its two adjacent profiles agree
    r = cupti_ref([1000.0] * 4 + [1008.0, 1008.0])
    set_kernel(r.where.workspace_path, FASTER, GPU_US=1002.0)
    v = r.save_and_test("global", "small real win")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win"), v.reason
    assert v.gpu_floor_pct == pytest.approx(0.2)  # min_gpu_gain_pct: the drift is not in the floor
    assert v.gpu_delta_pct == pytest.approx(0.595, abs=0.001)


def test_best_failing_its_second_profile_is_not_kept_and_says_so(cupti_ref):
    r = cupti_ref(1000.0, PROFILE_FAIL_AT=5)  # BEST's 6th profile: after the 4 baseline profiles and B1
    set_kernel(r.where.workspace_path, FASTER, GPU_US=900.0)
    v = r.save_and_test("global", "profiler crash")
    assert (v.verdict, v.code) == ("tie", "gpu_time_missing") and v.gpu_delta_pct is None
    assert "exited with code 3" in v.reason  # the profiler's own error, passed on: the text is the product


def test_a_candidate_whose_kernel_was_renamed_is_not_kept(cupti_ref):
    r = cupti_ref(1000.0)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=500.0, KERNEL_NAME="sgemm_renamed_by_the_compiler")
    v = r.save_and_test("global", "renamed")
    assert (v.verdict, v.code) == ("tie", "gpu_time_missing") and v.gpu_delta_pct is None
    assert "sgemm_renamed_by_the_compiler" in v.reason  # the text is the product: the kernels seen, named


def test_fewer_launches_in_the_profiled_run_is_skipped_work(cupti_ref):
    r = cupti_ref(1000.0)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=500.0, CALLS=10)
    v = r.save_and_test("global", "cached half the calls")
    assert (v.verdict, v.code) == ("tie", "skipped_work")


def test_a_profiler_lost_after_the_baseline_never_lets_the_script_metric_keep(cupti_ref, monkeypatch):
    from kopt_mcp.profilers.none import NoProfiler

    r = cupti_ref(1000.0)
    monkeypatch.setattr(r, "profiler", lambda detail=False: NoProfiler())  # e.g. cupti-python uninstalled
    set_kernel(r.where.workspace_path, FASTER, GPU_US=900.0)
    v = r.save_and_test("global", "faster, but nothing can confirm it on the GPU")
    assert (v.verdict, v.code) == ("tie", "profiler_lost") and v.metric_used == "profiler GPU time"


def test_a_profiler_that_cannot_be_built_any_more_is_not_kept_either(cupti_ref, monkeypatch):
    from kopt_mcp.errors import ProfilerError

    r = cupti_ref(1000.0)

    def gone(detail=False):
        raise ProfilerError("cupti-python is not importable: pip install cupti-python")

    monkeypatch.setattr(r, "profiler", gone)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=900.0)
    v = r.save_and_test("global", "faster")
    assert (v.verdict, v.code) == ("tie", "profiler_lost")
    assert "pip install cupti-python" in v.reason  # the text is the product: it says what to install


def test_without_a_profiler_from_the_start_the_script_metric_decides(ref):
    # the toy session's baseline had no profiler (best.gpu_us is None): the script metric is the keep metric
    assert ref.books.state.best.gpu_us is None
    set_kernel(ref.where.workspace_path, FASTER)
    v = ref.save_and_test("global", "faster")
    assert (v.verdict, v.code) == ("improved", "script_only") and v.gpu_delta_pct is None


class _RecordedNcu:
    """Stands in for ncu as the benchmark's parent: runs the benchmark, then leaves the same real
    recorded ncu CSV (H200, torch softmax) for every tree, as ncu would for a candidate whose
    in-process gain was forged: out of process its kernels are BEST's."""

    @staticmethod
    def make():
        import shlex

        from kopt_mcp.profilers.confirm import LOG_NAME, ConfirmNcu
        from tests.conftest import FIXTURES

        class Recorded(ConfirmNcu):
            def wrap(self, command, out_dir):
                rec = FIXTURES / "ncu" / "h200_raw_page_torch_matmul_softmax.csv"
                return f"{command} && cp {shlex.quote(str(rec))} {shlex.quote(str(out_dir / LOG_NAME))}"

        return Recorded(kernel_regex="softmax")


def test_commit_refuses_a_keep_that_the_out_of_process_measurement_refutes(cupti_ref, monkeypatch):
    """The in-process (replayed CUPTI) trace claims 5%; the confirming run with the profiler as the
    benchmark's parent shows candidate == BEST: not committed, archived, BEST unchanged, and the
    ledger holds the `confirmation` record with both gains."""
    import kopt_mcp.referee.confirmation as confirm

    r = cupti_ref(1000.0)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=950.0)
    assert r.save_and_test("global", "faster").verdict == "improved"
    best = r.books.state.best.commit
    prof = _RecordedNcu.make()
    monkeypatch.setattr(confirm, "confirm_profiler", lambda *a, **k: (prof, "recorded ncu"))
    c = r.commit_improvement("faster")
    assert not c.committed and c.code == "refuted", c.reason
    assert r.books.state.best.commit == best and r.books.state.phase.value == "ready"
    rec = next(e for e in reversed(r.books.store.ledger()) if e["event"] == "confirmation")
    assert rec["status"] == "refuted" and rec["claimed_gain_pct"] == pytest.approx(5.0, abs=0.01)
    assert rec["gain_pct"] == pytest.approx(0.0)
    assert any(p.name.endswith("improved-not-kept.patch") for p in (r.books.store.root / "attempts").iterdir())


def test_commit_without_an_out_of_process_profiler_goes_ahead_and_says_so(cupti_ref):
    r = cupti_ref(1000.0)
    set_kernel(r.where.workspace_path, FASTER, GPU_US=950.0)
    assert r.save_and_test("global", "faster").verdict == "improved"
    c = r.commit_improvement("faster")
    assert c.committed and c.code == "unconfirmed", c.reason
    rec = next(e for e in reversed(r.books.store.ledger()) if e["event"] == "confirmation")
    assert rec["status"] == "unavailable"


def test_a_time_driven_harness_seen_at_the_baseline_stays_time_driven(cupti_ref):
    # the baseline's profiles launched the kernel 20, 21, 20, 20 times (do_bench-like); this attempt's
    # two BEST profiles happen to launch it 20 times each and the 5%-faster candidate 19 times
    r = cupti_ref([1000.0, 1050.0, 1000.0, 1000.0, 1000.0, 1000.0], CALLS=[20, 21, 20, 20, 20, 20])
    assert r.books.state.launch_counts_vary
    set_kernel(r.where.workspace_path, FASTER, GPU_US=19 * 47.5, CALLS=19)
    v = r.save_and_test("global", "5% faster per launch")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win"), v.reason  # 19 launches against BEST's 20


def test_a_fixed_count_harness_still_calls_a_missing_launch_skipped_work(cupti_ref):
    r = cupti_ref(1000.0)
    assert not r.books.state.launch_counts_vary
    set_kernel(r.where.workspace_path, FASTER, GPU_US=19 * 47.5, CALLS=19)
    v = r.save_and_test("global", "one launch fewer")
    assert (v.verdict, v.code) == ("tie", "skipped_work")
