"""The out-of-process confirmation measured per harness unit (ConfirmNcu `by_unit`, issue 34).

The failure this answers, measured first (one H200, 2026-12-02): Liger's RMSNorm backward runs on
132 programs for every T, so ncu's per-launch-configuration filter profiled the first 50 launches of
the one configuration, all from the first T, and refuted a real +1.59% win (-2.40%). By unit, the
injector's NVTX mode names each launch's unit and invocation, and every config is measured.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_mcp.evidence.confirm import TargetTime
from kopt_mcp.profilers.confirm import UNIT_INVOCATIONS, ConfirmNcu, target_time
from kopt_mcp.profilers.cupti import INJECT_DIR
from kopt_mcp.profilers.ncu import parse_ncu_csv
from kopt_mcp.rules.confirm import decide_confirmation
from kopt_mcp.rules.decision import Code

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
#: a persistent Triton kernel (grid 132 for all three row counts), three invocations per do_bench call
#: marked "kopt/u<rows>/i<i>", recorded under ncu --nvtx on an H200 (see its .source.txt)
NVTX_RAW = FIX / "h200_nvtx_units_raw.csv"


def test_by_unit_wrap_profiles_the_marked_invocations_of_every_unit():
    line = ConfirmNcu(target_names=["_rms_norm_backward_kernel"], by_unit=True).wrap(
        "PYTHONPATH=src python bench.py", Path("/runs/7/confirm"))
    words = shlex.split(line)
    first, count = UNIT_INVOCATIONS
    assert words[0] == f"KOPT_NVTX_UNITS={first},{count}"
    assert words[1].startswith(f"PYTHONPATH={INJECT_DIR}") and words[2] == "ncu"
    opts = words[3:-3]
    assert "--nvtx" in opts and opts[opts.index("--nvtx-push-pop-scope") + 1] == "process"
    assert opts[opts.index("--nvtx-include") + 1] == "regex:kopt/"
    assert "--filter-mode" not in opts  # the marks select the launches, not the launch configuration
    # a PYTHONPATH the command sets itself keeps the injector in front
    assert words[-3:-1] == ["bash", "-c"] and words[-1] == f"PYTHONPATH={INJECT_DIR}:src python bench.py"
    assert "KOPT_CUPTI" not in line and "cupti_collect" not in line  # no in-process trace to forge


def test_recorded_nvtx_run_gives_one_median_per_unit():
    trace = parse_ncu_csv(NVTX_RAW, groups=True)
    assert [(u.index, u.invocations) for u in trace.units] == [(1023, 3), (4095, 3), (16383, 3)]
    prof = ConfirmNcu(target_names=["persist"], by_unit=True)
    t = target_time(trace, prof.target_regex(trace))
    # one launch group (grid 132) holds all three configs; the units keep them apart
    assert len(t.groups) == 1 and t.launches == 9
    assert t.units == pytest.approx({1023: 7.232, 4095: 21.888, 16383: 79.104})
    assert t.us == pytest.approx(7.232 + 21.888 + 79.104)


def test_a_trace_without_marks_has_no_units():
    trace = parse_ncu_csv(FIX / "h200_raw_page_torch_matmul_softmax.csv", groups=True)
    assert trace.units is None


def units(us: dict[int, float]) -> TargetTime:
    return TargetTime(us=-1.0, launches=6 * len(us), groups=["k grid=(132,1,1) block=(256,1,1)"], kernels=["k"],
                      units=us)


def test_the_rule_sums_per_unit_medians_so_a_win_in_large_configs_is_confirmed():
    # the first (small) config is slower, the large ones faster: +8.0% over the units, as the claim
    best, cand = units({0: 10.0, 1: 40.0, 2: 150.0}), units({0: 11.0, 1: 37.0, 2: 136.0})
    c = decide_confirmation(8.0, 0.4, best, cand, "ncu")
    assert (c.status, c.code) == ("confirmed", Code.CONFIRMED)
    assert c.gain_pct == pytest.approx(8.0)


def test_a_unit_the_candidate_skips_is_refuted():
    best, cand = units({0: 10.0, 1: 40.0, 2: 150.0}), units({0: 9.0, 2: 140.0})
    c = decide_confirmation(8.0, 0.4, best, cand, "ncu")
    assert (c.status, c.code) == ("refuted", Code.REFUTED) and c.gain_pct is None


FAKE_TORCH = '''
import atexit, types
LOG = []
def _push(name): LOG.append("push " + name)
def _pop(): LOG.append("pop")
cuda = types.SimpleNamespace(nvtx=types.SimpleNamespace(range_push=_push, range_pop=_pop))
atexit.register(lambda: print("\\n".join(LOG)))
'''

FAKE_TESTING = '''
def do_bench(fn, warmup=25, rep=100):
    for _ in range(10):
        fn()
    return 1.0
'''


def test_the_injectors_nvtx_mode_marks_the_chosen_invocations_of_each_unit(tmp_path):
    """A real benchmark process with the injector first on PYTHONPATH in NVTX mode, a stand-in torch
    (its nvtx calls logged) and `from triton.testing import do_bench`: invocations 1..2 of each of
    two units run inside "kopt/u<k>/i<i>", nothing else does, and no CUPTI trace starts."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (tmp_path / "triton").mkdir()
    (tmp_path / "triton" / "__init__.py").write_text("")
    (tmp_path / "triton" / "testing.py").write_text(FAKE_TESTING)
    (tmp_path / "bench.py").write_text("import torch\nfrom triton.testing import do_bench\n"
                                       "do_bench(lambda: None)\ndo_bench(lambda: None)\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{INJECT_DIR}:{tmp_path}", "KOPT_NVTX_UNITS": "1,2"}
    r = subprocess.run([sys.executable, "bench.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:8] == ["push kopt/u1/i1", "pop", "push kopt/u1/i2", "pop",
                                        "push kopt/u2/i1", "pop", "push kopt/u2/i2", "pop"]
    assert "cupti" not in r.stderr.lower()


def _liger(which: str, by_unit: bool) -> TargetTime:
    trace = parse_ncu_csv(FIX / f"h200_liger_rmsnorm_confirm_{which}.csv", groups=True)
    if not by_unit:
        trace.units = None
    prof = ConfirmNcu(target_names=["_rms_norm_forward_kernel", "_rms_norm_backward_kernel"], by_unit=True)
    return target_time(trace, prof.target_regex(trace))


def test_recorded_liger_confirmation_by_unit_confirms_the_win_the_launch_groups_could_not():
    """Liger's RMSNorm, backward at 16 warps, the verdict +1.443% (floor 0.494%): ncu by unit measured
    +1.19% over 12 units and confirmed. The same launches grouped by launch shape put every T's
    backward into one group (grid 132) and read +0.20%: below the agreement needed, refuted."""
    best, cand = _liger("best", True), _liger("candidate", True)
    assert (best.launches, cand.launches, len(best.units), len(cand.units)) == (96, 96, 12, 12)
    c = decide_confirmation(1.443, 0.494, best, cand, "ncu")
    assert (c.status, c.code) == ("confirmed", Code.CONFIRMED)
    assert c.gain_pct == pytest.approx(1.19, abs=0.01)
    gb, gc = _liger("best", False), _liger("candidate", False)
    assert sum("_rms_norm_backward_kernel grid=(132,1,1)" in g for g in gb.groups) == 1
    by_group = decide_confirmation(1.443, 0.494, gb, gc, "ncu")
    assert by_group.status == "refuted" and by_group.gain_pct == pytest.approx(0.20, abs=0.01)


def test_by_unit_the_benchmark_runs_its_own_harness_without_kopt_profile():
    from kopt_mcp.profilers.base import profile_env

    # the Triton example skips do_bench under KOPT_PROFILE=1: by unit ncu then found no marked launch
    # (H200, 2026-12-02, `kopt-mcp demo --example triton`: "no ncu CSV header ... in 7 lines")
    assert profile_env(ConfirmNcu(target_names=["softmax"], by_unit=True)) == {}
    assert profile_env(ConfirmNcu(target_names=["softmax"])) == {"KOPT_PROFILE": "1"}


def test_without_marked_launches_both_trees_are_measured_again_by_launch_configuration():
    from kopt_mcp.errors import ProfilerError
    from kopt_mcp.referee.confirmation import confirm_keep

    seen: list[tuple[str, bool]] = []

    def run_profiled(tree, prof, label):
        seen.append((label, prof.by_unit))
        if prof.by_unit:  # as ncu left it for the demo: a log without one profiled launch
            raise ProfilerError("ncu.csv: no ncu CSV header (a row starting with \"ID\") in 7 lines")
        return parse_ncu_csv(FIX / "h200_raw_page_torch_matmul_softmax.csv", groups=True)

    prof = ConfirmNcu(kernel_regex="softmax", by_unit=True)
    c = confirm_keep(run_profiled, "cand", "best", 5.0, 0.5, vendor="nvidia", profiler=prof)
    assert seen == [("confirm-candidate", True), ("confirm-best", True),
                    ("confirm-candidate", False), ("confirm-best", False)]
    assert c.best is not None and c.best.units == {} and len(c.runs) == 4
    assert (c.status, c.code) == ("refuted", Code.REFUTED)  # the same recording for both trees: no gain


def test_a_stored_best_measurement_leaves_one_run_the_candidates():
    """BEST's measurement stored from the last confirmed commit (rules/confirm.py reusable_best) stands
    in for BEST's run: the recorded Liger confirmation gives the same +1.19% from the candidate's run alone."""
    from kopt_mcp.profilers.confirm import selection_key
    from kopt_mcp.referee.confirmation import confirm_keep

    best, seen, asked = _liger("best", True), [], []

    def run_profiled(tree, prof, label):
        seen.append(label)
        return parse_ncu_csv(FIX / "h200_liger_rmsnorm_confirm_candidate.csv", groups=True)

    prof = ConfirmNcu(target_names=["_rms_norm_backward_kernel", "_rms_norm_forward_kernel"], by_unit=True)
    c = confirm_keep(run_profiled, "cand", "best", 1.443, 0.494, vendor="nvidia", profiler=prof,
                     best_known=lambda sel: asked.append(sel) or best)
    assert seen == ["confirm-candidate"] and c.runs == ["confirm-candidate"] and c.best_reused
    assert asked == [selection_key(prof)] and c.selection == selection_key(prof)
    assert (c.status, c.code) == ("confirmed", Code.CONFIRMED)
    assert c.gain_pct == pytest.approx(1.19, abs=0.01)
