"""Triton's autotuner's do_bench calls are not harness units (evidence/units.py `measured_units`,
read by evidence/segment.py `trace_units`), on two real CUPTI traces of flash-linear-attention's
LayerNorm benchmark (tests/fixtures/cupti/h200_fla_ln_autotune/SOURCE.md): the first run of a
session autotuned (15 marked units, 7 of them `Autotuner._bench.<locals>.kernel_call`), the second
found the results cached (8). The keep metric must see the benchmark's 8 in both, paired unit by unit,
and the baseline's spread between them must be that pairing's, not the autotuning's 27%; a candidate
whose run autotuned (its kernel's source changed) must be judged, and a planted 10% win kept."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from kopt_mcp.evidence.segment import trace_units
from kopt_mcp.evidence.trace import KernelTrace, target_gpu_time
from kopt_mcp.evidence.units import AUTOTUNER_LABEL, measured_units
from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.referee.baseline import _baseline_spreads
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.units import judge_units, unit_gpu_times, unit_spread_pct
from tests.rules.test_units_recorded import POLICY

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cupti" / "h200_fla_ln_autotune"
TARGET = "^layer_norm_bwd_kernel1$|^layer_norm_fwd_kernel1$"


def _trace(name: str, tmp_path: Path) -> KernelTrace:
    d = tmp_path / name
    d.mkdir()
    (d / (name.split("-", 1)[1] + ".json")).write_bytes(gzip.decompress((FIXTURE / f"{name}.json.gz").read_bytes()))
    return parse_cupti_dir(d)


@pytest.fixture
def runs(tmp_path) -> tuple[KernelTrace, KernelTrace]:
    return _trace("run1-cupti-1398", tmp_path), _trace("run2-cupti-1498", tmp_path)


def test_the_autotuners_units_are_left_out_and_the_rest_indexed_again(runs):
    first, second = runs
    assert (len(first.units), len(second.units)) == (15, 8)
    assert sum(u.label.startswith(AUTOTUNER_LABEL) for u in first.units) == 7
    kept = trace_units(first)
    assert [u.index for u in kept] == list(range(8))
    assert [u.label for u in kept] == [u.label for u in trace_units(second)]
    assert measured_units(second.units) is second.units  # nothing to leave out: the same list


def test_the_runs_pair_unit_by_unit_and_the_baseline_spread_is_theirs(runs):
    first, second = runs
    spread = unit_spread_pct(trace_units(first), trace_units(second), TARGET)
    assert spread is not None and spread < 0.1
    totals = [target_gpu_time(t, TARGET)[0] for t in runs]
    assert totals == pytest.approx([409091.267, 311519.28])  # the autotuning's 27% apart
    assert _baseline_spreads(list(runs), totals, TARGET) == pytest.approx([spread])
    us = [unit_gpu_times(trace_units(t), TARGET, ["all"])[0] for t in runs]
    assert us == pytest.approx([4431.44, 4432.01], abs=0.01)


def _faster(units: list, share: float) -> list:
    """`units` with every target kernel's GPU time per invocation times `share` (a planted win)."""
    def scaled(k: str, v: dict) -> dict:
        return {i: t * share for i, t in v.items()} if re.search(TARGET, k) else v
    return [u.model_copy(update={"per_invocation": {k: scaled(k, v) for k, v in u.per_invocation.items()}})
            for u in units]


def test_a_candidate_whose_run_autotuned_is_judged_on_the_benchmarks_units(runs):
    """After an edit of the kernel the candidate's first run finds no autotuning result cached (its
    source changed) and autotunes, while BEST's runs do not: 15 units against 8. Judged on the raw
    units that was gpu_time_unreproducible, so no win of an autotuned kernel could be kept."""
    cached, autotuned = runs[1], runs[0]
    raw = judge_units(cached.units, autotuned.units, cached.units, TARGET, POLICY)
    assert raw.code == Code.GPU_TIME_UNREPRODUCIBLE  # the raw units: what the keep metric no longer reads
    same = judge_units(trace_units(cached), trace_units(autotuned), trace_units(cached), TARGET, POLICY)
    assert same.code == Code.GPU_TIME_BELOW_FLOOR and not same.kept
    win = judge_units(trace_units(cached), _faster(trace_units(autotuned), 0.9), trace_units(cached), TARGET, POLICY)
    assert win.kept and win.code == Code.GPU_TIME_WIN and win.gpu_delta_pct == pytest.approx(10.0, abs=0.1)


def test_a_harness_unit_relabelled_as_the_autotuners_hides_no_config(runs):
    """The cheat on the new filter: code in the benchmark process gives one of the candidate's harness
    units the autotuner's label, so the keep metric drops it. Its 7 units do not pair with BEST's 8
    (the configs' times are too far apart to merge): not kept, whichever unit is hidden."""
    best = trace_units(runs[1])
    for k in range(8):
        forged = [u.model_copy(update={"label": AUTOTUNER_LABEL + "<locals>.kernel_call"}) if u.index == k else u
                  for u in runs[1].units]
        d = judge_units(best, _faster(measured_units(forged), 0.5), best, TARGET, POLICY)
        assert (len(measured_units(forged)), d.code, d.kept) == (7, Code.GPU_TIME_UNREPRODUCIBLE, False)
