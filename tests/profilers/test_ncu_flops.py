"""Issue 38 item 3, FLOP/s: ncu's floating-point counters, each math path's peak, and the speed-of-light rule on them.

Evidence: REAL ncu raw pages recorded on one H200 (2026-12-02, ncu 2025.3.1; benchmarks/flops/):
- tests/fixtures/ncu/h200_flops_workload_raw.csv: benchmarks/flops/workload.py (a 4096^3 fp32 GEMM with
  TF32 off, fp16 and bf16 GEMMs, an fp32 addcmul over 2^26 elements, and torch's randn/casts before them)
  with the FLOP counters, the CUDA-core peaks and the SM clock;
- tests/fixtures/ncu/h200_flops_tensor_peak_raw.csv: the same workload, the tensor paths' peaks only.
The cheat (a time that is not the kernel's) is the recorded page with one launch's duration halved."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kopt_mcp.profilers.confirm import CONFIRM_METRICS, ConfirmNcu, selection_key, target_time
from kopt_mcp.profilers.ncu import parse_ncu_csv
from kopt_mcp.profilers.ncu_flops import FLOP_METRICS, flop_fields
from kopt_mcp.rules.confirm import decide_confirmation
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.light import BEST_MARGIN, judge_light

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
PAGE = FIX / "h200_flops_workload_raw.csv"
SGEMM = "sm80_xmma_gemm"
N = 4096


def _rows(path: Path) -> tuple[list[str], list[str], list[list[str]], list[str]]:
    lines = path.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    return rows[0], rows[1], rows[2:], lines[:start]


def _time(path: Path, regex: str):
    return target_time(parse_ncu_csv(path, groups=True), regex)


def _faster(tmp_path: Path, kernel: str, factor: float) -> Path:
    """The recorded page with `kernel`'s durations divided by `factor` (the cheat: a time not the kernel's)."""
    header, units, rows, head = _rows(PAGE)
    name = header.index("Kernel Name")
    for r in rows:
        if kernel in r[name]:
            for col in ("gpu__time_duration.sum", "gpu__time_duration.avg", "gpu__time_duration.min", "gpu__time_duration.max"):
                j = header.index(col)
                r[j] = f"{float(r[j].replace(',', '')) / factor:,.0f}"
    out = tmp_path / "faster.csv"
    with out.open("w", newline="") as f:
        f.write("\n".join(head) + "\n")
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows([header, units, *rows])
    return out


def test_every_flop_metric_asked_for_was_accepted_by_ncu_on_the_h200():
    recorded = set(_rows(PAGE)[0]) | set(_rows(FIX / "h200_flops_tensor_peak_raw.csv")[0])
    assert [m for m in FLOP_METRICS if m not in recorded] == []


def test_the_recorded_fp32_gemm_did_2n3_flops_at_77_percent_of_the_fp32_peak():
    t = _time(PAGE, SGEMM)
    kernel = next(k for k in parse_ncu_csv(PAGE).kernels if SGEMM in k.name)
    assert kernel.extra["flops fp32"] == 2 * 68_736_253_952  # FFMA x 2, recorded
    assert kernel.extra["flops fp32"] == pytest.approx(2 * N**3, rel=1e-3)
    # 16,896 FFMA per cycle x 2 x the fastest SM's clock, 1,974,339,325 Hz (the average: 1,968,145,019 Hz)
    assert t.flop_peaks["fp32"] == pytest.approx(16_896 * 2 * 1_974_339_325.19, rel=1e-9)
    assert t.flop_rates["fp32"] / 1e12 == pytest.approx(51.07, abs=0.01)
    check = judge_light(t, t)
    assert check.code is None and check.flop_path == "fp32"
    assert check.pct_of_flop_peak == pytest.approx(76.5, abs=0.1)
    assert "fp32 51.1 TFLOP/s, 76.5% of its 66.7 TFLOP/s peak" in check.shown()


def test_the_tensor_path_counts_operations_and_its_h200_peak_is_the_sparse_rate():
    fp16 = next(k for k in parse_ncu_csv(PAGE).kernels if "nvjet_sm90_hsh" in k.name)
    assert fp16.extra["flops tensor fp16"] == 2 * N**3 == 137_438_953_472
    assert "flop_peak tensor fp16" not in fp16.extra  # that page did not ask for the tensor peaks
    header, _, rows, _ = _rows(FIX / "h200_flops_tensor_peak_raw.csv")
    peak = {h: float(rows[0][j].replace(",", "")) for j, h in enumerate(header) if h.endswith(".sum.peak_sustained")}
    assert peak["sm__ops_path_tensor_src_fp16.sum.peak_sustained"] == 1_081_344
    assert peak["sm__ops_path_tensor_src_tf32_dst_fp32.sum.peak_sustained"] == 540_672
    got = flop_fields({"sm__ops_path_tensor_src_fp16.sum": 2.0 * N**3,
                       "sm__ops_path_tensor_src_fp16.sum.peak_sustained": 1_081_344,
                       "sm__cycles_elapsed.avg.per_second": 1.98e9}.get)
    # 2.14 POP/s at 1.98 GHz: twice NVIDIA's dense fp16 figure (989 TFLOP/s), so the check is lenient here
    assert got["flop_peak tensor fp16"] / 1e15 == pytest.approx(2.141, abs=0.001)


def test_a_time_the_math_units_cannot_reach_is_beyond_the_speed_of_light(tmp_path):
    best = _time(PAGE, SGEMM)
    cheat = _time(_faster(tmp_path, SGEMM, 2.0), SGEMM)  # 153.1% of the fp32 peak
    check = judge_light(best, cheat)
    assert check.code == Code.BEYOND_SPEED_OF_LIGHT and check.pct_of_flop_peak == pytest.approx(153.1, abs=0.2)
    c = decide_confirmation(40.0, 0.5, best, cheat, "ncu")
    assert (c.status, c.code) == ("refuted", Code.BEYOND_SPEED_OF_LIGHT)
    # under the margin passes: 1.3 x faster -> 99.5% of the peak
    near = judge_light(best, _time(_faster(tmp_path, SGEMM, 1.3), SGEMM))
    assert near.code is None and near.pct_of_flop_peak < BEST_MARGIN * 100


def test_a_confirmed_keep_reports_its_flop_peak_share():
    t = _time(PAGE, SGEMM)
    slower = t.model_copy(update={"us": t.us * 1.2})
    c = decide_confirmation(16.0, 0.5, slower, t, "ncu")
    assert (c.status, c.code) == ("confirmed", Code.CONFIRMED)
    assert "76.5% of its 66.7 TFLOP/s peak" in c.reason


def test_counters_absent_or_a_clock_in_an_unknown_unit_give_no_flop_figures(tmp_path):
    assert flop_fields({}.get) == {}
    assert flop_fields({"sm__sass_thread_inst_executed_op_ffma_pred_on.sum": 10.0}.get) == {"flops fp32": 20.0}
    # a launch without such work counts as 0, so a kernel's mean covers all its launches
    assert flop_fields({"sm__sass_thread_inst_executed_op_ffma_pred_on.sum": 0.0}.get) == {"flops fp32": 0.0}
    header, units, rows, head = _rows(PAGE)
    for rollup in ("avg", "max"):
        clock = header.index(f"sm__cycles_elapsed.{rollup}.per_second")
        assert units[clock] == "hz"
        units[clock] = "furlong/fortnight"
    odd = tmp_path / "odd.csv"
    with odd.open("w", newline="") as f:
        f.write("\n".join(head) + "\n")
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows([header, units, *rows])
    t = _time(odd, SGEMM)  # the work is still counted; no peak, so no % and no refusal, and no error
    assert t.flop_rates["fp32"] / 1e12 == pytest.approx(51.07, abs=0.01) and t.flop_peaks == {}
    assert judge_light(t, t).pct_of_flop_peak is None


def test_the_confirmation_asks_for_the_counters_only_with_confirm_flops():
    plain, counted = ConfirmNcu(target_names=["softmax_kernel"]), ConfirmNcu(target_names=["softmax_kernel"], flops=True)
    asked = lambda prof: prof.wrap("python bench.py", Path("/runs/1")).split("--metrics ")[1].split()[0].split(",")  # noqa: E731
    assert asked(plain) == list(CONFIRM_METRICS)
    assert asked(counted) == [*CONFIRM_METRICS, *FLOP_METRICS]
    assert counted.by_launch_config().flops is True
    # a stored BEST measured without the counters is not reused for a run with them (different passes)
    assert selection_key(plain) != selection_key(counted)
