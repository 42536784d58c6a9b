"""Issue 38 item 3, the cheats first: speed of light at the out-of-process confirmation.

Evidence: the REAL ncu logs of the Liger RMSNorm confirmation on an H200 (tests/fixtures/ncu/
h200_liger_rmsnorm_confirm_{best,candidate}.csv, ncu 2025.3.1 raw page, by harness unit), which carry
the device's memory interface (6,016 bits, 3,201,000 kHz) on every row. They were recorded with
gpu__time_duration.sum only, so the dram__bytes_read.sum / dram__bytes_write.sum columns below are
STAND-INS added in ncu's raw-page layout (a units row of "Mbyte"), derived from each launch's recorded
duration at a stated bandwidth; the durations, units and device columns are the recording's."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kopt_mcp.evidence.confirm import TargetTime
from kopt_mcp.evidence.peak import peak_by_name, peak_from_interface
from kopt_mcp.profilers.confirm import CONFIRM_METRICS, ConfirmNcu, target_time
from kopt_mcp.profilers.ncu import parse_ncu_csv
from kopt_mcp.rules.confirm import decide_confirmation
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.light import MIN_BYTES, judge_light

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
TARGETS = ["_rms_norm_forward_kernel", "_rms_norm_backward_kernel"]


def _with_dram(which: str, out: Path, gbps: float, bytes_scale: float = 1.0, time_scale: float = 1.0) -> Path:
    """The recorded log of `which` with DRAM byte columns at `gbps` x the recorded duration (read 2/3,
    written 1/3), bytes x `bytes_scale`, durations x `time_scale` (cheats)."""
    lines = (FIX / f"h200_liger_rmsnorm_confirm_{which}.csv").read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    header, units = rows[0], rows[1]
    t = header.index("gpu__time_duration.sum")
    assert units[t] == "ns"
    header += ["dram__bytes_read.sum", "dram__bytes_write.sum"]
    units += ["Mbyte", "Mbyte"]
    for r in rows[2:]:
        ns = float(r[t].replace(",", ""))
        mb = gbps * ns / 1e3 * bytes_scale  # GB/s x ns = bytes; / 1e6 -> MB
        for col in ("gpu__time_duration.sum", "gpu__time_duration.avg", "gpu__time_duration.min", "gpu__time_duration.max"):
            if col in header:
                r[header.index(col)] = f"{ns * time_scale:,.0f}"
        r += [f"{mb * 2 / 3 / 1e3:.4f}", f"{mb / 3 / 1e3:.4f}"]
    path = out / f"{which}.csv"
    with path.open("w", newline="") as f:
        f.write("\n".join(lines[:start]) + "\n")
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    return path


def _time(path: Path) -> TargetTime:
    trace = parse_ncu_csv(path, groups=True)
    return target_time(trace, ConfirmNcu(target_names=TARGETS, by_unit=True).target_regex(trace))


def test_the_recorded_h200_log_gives_the_datasheet_peak_and_persisting_l2_size():
    t = _time(FIX / "h200_liger_rmsnorm_confirm_best.csv")
    # 6,016 bits / 8 x 3,201,000 kHz x 2 = 4,814 GB/s; NVIDIA's H200 datasheet: 4.8 TB/s
    assert t.peak_gbps == pytest.approx(4814.3, abs=0.5) == pytest.approx(peak_from_interface(6016, 3_201_000))
    assert t.peak_gbps == pytest.approx(peak_by_name("NVIDIA H200"), rel=0.01)
    assert t.persisting_l2_bytes == 11_796_480 and t.gbps is None and t.dram_bytes is None
    assert "dram__bytes_read.sum" in CONFIRM_METRICS and "dram__bytes_write.sum" in CONFIRM_METRICS


def test_an_honest_win_is_confirmed_with_its_percent_of_peak(tmp_path):
    best, cand = _time(_with_dram("best", tmp_path, 3000.0)), _time(_with_dram("candidate", tmp_path, 3000.0))
    assert len(cand.unit_bytes) == 12 and cand.gbps == pytest.approx(3000.0, rel=0.01)
    c = decide_confirmation(1.443, 0.494, best, cand, "ncu")
    assert (c.status, c.code) == ("confirmed", Code.CONFIRMED)
    assert c.pct_of_peak == pytest.approx(3000.0 / 4814.3 * 100, abs=0.5)


def test_cheat_beyond_the_speed_of_light_is_refuted(tmp_path):
    # the candidate's launches 5x shorter for the same bytes: 15,000 GB/s on a 4,814 GB/s device
    best = _time(_with_dram("best", tmp_path, 3000.0))
    cand = _time(_with_dram("candidate", tmp_path, 3000.0, time_scale=0.2))
    c = decide_confirmation(80.0, 0.494, best, cand, "ncu")
    assert (c.status, c.code) == ("refuted", Code.BEYOND_SPEED_OF_LIGHT) and c.blocks_commit
    assert c.pct_of_peak == pytest.approx(15000.0 / 4814.3 * 100, rel=0.01)


def test_cheat_early_exit_on_a_cached_flag_moves_too_few_bytes(tmp_path):
    # launched every invocation, exits early: 2% of BEST's bytes, in far less time (same bandwidth)
    best = _time(_with_dram("best", tmp_path, 3000.0))
    cand = _time(_with_dram("candidate", tmp_path, 3000.0, bytes_scale=0.02 / 0.3, time_scale=0.3))
    d = judge_light(best, cand)
    assert d.code == Code.TOO_FEW_BYTES
    # only units where BEST moved >= 64 MiB per invocation (more than the L2) are judged: the large-T ones
    assert d.units and all(best.unit_bytes[k] >= MIN_BYTES for k in d.units)
    assert len(d.units) < len(best.unit_bytes)  # the small ones are left out
    c = decide_confirmation(70.0, 0.494, best, cand, "ncu")
    assert (c.status, c.code) == ("refuted", Code.TOO_FEW_BYTES)


def test_an_honest_fusion_that_moves_a_fifth_of_bests_bytes_is_not_too_few(tmp_path):
    # an intermediate no longer written and read back: 1/5 of BEST's bytes in 1/5 of its time (same GB/s)
    best = _time(_with_dram("best", tmp_path, 3000.0))
    cand = _time(_with_dram("candidate", tmp_path, 3000.0, bytes_scale=0.2, time_scale=0.2))
    d = judge_light(best, cand)
    assert d.code is None and d.units == []
    assert min(cand.unit_bytes[k] / best.unit_bytes[k] for k in best.unit_bytes) == pytest.approx(0.2, rel=0.05)


def test_cheat_persisting_l2_window_seen_out_of_process_is_refuted(tmp_path):
    best = _time(_with_dram("best", tmp_path, 3000.0))
    cand = _time(_with_dram("candidate", tmp_path, 3000.0))
    cand = cand.model_copy(update={"persisting_l2_bytes": 39_321_600.0})  # the H200's max persisting size
    c = decide_confirmation(1.443, 0.494, best, cand, "ncu")
    assert (c.status, c.code) == ("refuted", Code.PERSISTING_L2)


def test_without_dram_columns_the_confirmation_is_as_before():
    best, cand = _time(FIX / "h200_liger_rmsnorm_confirm_best.csv"), _time(FIX / "h200_liger_rmsnorm_confirm_candidate.csv")
    c = decide_confirmation(1.443, 0.494, best, cand, "ncu")
    assert (c.status, c.code) == ("confirmed", Code.CONFIRMED) and c.pct_of_peak is None
    assert c.gain_pct == pytest.approx(1.19, abs=0.01)


# ---- the REAL recording with DRAM bytes: the Triton example on an H200 (the lead's, 2026-12-02; .source.txt) ----

SOFTMAX = FIX / "h200_triton_softmax_dobench_dram_raw.csv"


def test_real_h200_dram_bytes_parse_and_the_peak_agrees_with_nvml():
    from kopt_mcp.profilers.ncu import parse_ncu_csv

    trace = parse_ncu_csv(SOFTMAX, groups=True)
    (k,) = trace.kernels
    assert k.calls == 40 and k.extra["persisting_l2_bytes"] == 11_796_480
    # NVML on the same device: 6,016 bits x 3,201 MHz (nvml_membus.txt) -> the raw page's own figure
    assert k.extra["dram_peak_gbps"] == pytest.approx(peak_from_interface(6016, 3201 * 1000))
    t = target_time(trace, "softmax_kernel")
    assert t.peak_gbps == pytest.approx(4814.3, abs=0.1) and t.persisting_l2_bytes == 11_796_480
    # 302592 x 197 fp16 read once: 119.2 MB per launch, the first launch's bytes read as recorded
    assert 32 * 119.2e6 < k.extra["dram_bytes"] * 40 and 0 < t.gbps < t.peak_gbps


def test_real_h200_honest_runs_pass_with_their_percent_of_peak():
    """The profile-mode and do_bench-mode recordings of the same kernel, as BEST and candidate: the
    same work, under the peak, bytes alike: no refusal. Averaged over a kernel's launches (no units in
    these runs) the do_bench run reads 28.2% of the DRAM peak (32 of its 40 launches are the per-CTA-bound
    short rows, 1,136-1,155 GB/s; the wide and long rows 2,772-2,893 GB/s), the profile run 42.8%."""
    best, cand = _time(SOFTMAX), _time(FIX / "h200_triton_softmax_profile_dram_raw.csv")
    d = judge_light(best, cand)
    assert d.code is None and d.pct_of_peak == pytest.approx(42.8, abs=0.1)
    assert best.gbps / best.peak_gbps * 100 == pytest.approx(28.2, abs=0.1)
    assert best.dram_bytes == pytest.approx(950.3e6, rel=0.01)  # bytes per step: 4 launch groups' mean bytes


def test_cheat_derived_from_the_real_recording_beyond_the_peak_is_refuted(tmp_path):
    # the recorded launches with their GPU time cut 5x, bytes as recorded: 6,800 GB/s on a 4,814 GB/s device
    lines = SOFTMAX.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    rows = list(csv.reader(lines[start:]))
    cols = [j for j, h in enumerate(rows[0]) if h.startswith("gpu__time_duration")]
    for r in rows[2:]:
        for j in cols:
            r[j] = f"{float(r[j].replace(',', '')) / 5:,.0f}"
    path = tmp_path / "cheat.csv"
    with path.open("w", newline="") as f:
        f.write("\n".join(lines[:start]) + "\n")
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    best, cand = _time(SOFTMAX), _time(path)
    c = decide_confirmation(80.0, 0.5, best, cand, "ncu")
    assert (c.status, c.code) == ("refuted", Code.BEYOND_SPEED_OF_LIGHT) and c.pct_of_peak > 105.0
