"""benchmarks/profiler_accuracy/run.py without a GPU: the arithmetic on per-launch durations (synthetic
duration lists: this is arithmetic, not a tool's output) and the report it writes from given numbers."""

from __future__ import annotations

import importlib.util
import math
import statistics
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "profiler_accuracy" / "run.py"
_spec = importlib.util.spec_from_file_location("profiler_accuracy", SCRIPT)
pa = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pa)


def _launches() -> list[float]:
    """10 slow warm-up launches (100 us), 20 batches of 50 whose means are 1.5..20.5 us, 40 singles of 12 us."""
    batches = [[float(i)] * 49 + [float(i) + 0.5 * 50] for i in range(1, 21)]  # mean of batch i: i + 0.5
    return [100.0] * 10 + [d for b in batches for d in b] + [12.0] * 40


def test_the_1050_launches_split_into_warm_up_batches_and_singles_in_launch_order():
    durations = [float(i) for i in range(pa.LAUNCHES)]
    warm, batches, singles = pa.split_launches(durations)
    assert pa.LAUNCHES == 1050 and warm == durations[:10] and singles == durations[-40:]
    assert len(batches) == 20 and all(len(b) == 50 for b in batches)
    assert batches[0] == durations[10:60] and batches[-1] == durations[960:1010]
    with pytest.raises(ValueError, match="expected 1050 softmax launches .* got 1049"):
        pa.split_launches(durations[:-1])


def test_median_batch_mean_is_the_median_of_each_batchs_mean():
    _, batches, _ = pa.split_launches(_launches())
    assert pa.median_batch_mean(batches) == pytest.approx(10.5 + 0.5)  # means 1.5..20.5: median 11.0
    assert pa.median_batch_mean([[1.0, 3.0], [10.0, 10.0], [4.0]]) == 4.0  # means 2, 10, 4
    with pytest.raises(ValueError):
        pa.median_batch_mean([[1.0], []])


def test_cupti_figures_a_to_d():
    durations = _launches()
    fig = pa.cupti_figures(durations)
    assert fig["batch"] == pytest.approx(11.0)
    assert fig["single"] == 12.0
    assert fig["median"] == statistics.median(durations)
    assert fig["mean"] == pytest.approx(sum(durations) / 1050)  # warm-up included
    assert fig["mean"] > fig["batch"]  # the slow warm-up counts in the mean only


def test_percent_differences_and_cells():
    assert pa.pct_diff(110.0, 100.0) == pytest.approx(10.0)
    assert pa.pct_diff(93.29, 100.0) == pytest.approx(-6.71)
    assert math.isnan(pa.pct_diff(1.0, 0.0)) and math.isnan(pa.pct_diff(float("nan"), 1.0))
    assert pa.fmt_pct(101.0, 100.0) == "+1.00%" and pa.fmt_pct(float("nan"), 1.0) == "-"
    assert pa.fmt_us(12.345) == "12.35" and pa.fmt_us(float("nan")) == "-"


@pytest.mark.parametrize("quick", [True, False])
def test_report_tables_from_given_numbers(tmp_path, monkeypatch, quick):
    walls = iter([2.0, 2.0, 2.0, 3.0, 3.0, 3.0] + [10.0] * 6)
    monkeypatch.setattr(pa, "events_untraced", lambda m, n: (10.0, 12.0))
    monkeypatch.setattr(pa, "events_traced", lambda m, n, scratch: (10.1, 12.0, _launches()))
    monkeypatch.setattr(pa, "ncu_median", lambda m, n, scratch, cache: 9.0 if cache == "all" else 9.9)
    monkeypatch.setattr(pa, "wall", lambda cmd, cwd: next(walls))
    assert pa.main(tmp_path, quick=quick) == 0
    text = (tmp_path / "profiler_accuracy.md").read_text()
    row1 = next(ln for ln in text.splitlines() if ln.startswith("| M=4096,N=16384 | 10.10 | 12.00 |"))
    assert "| 11.00 | +8.91% |" in row1  # (a) vs events batch: (11 - 10.1) / 10.1
    assert "| 12.00 | +0.00% |" in row1  # (b) vs events single
    assert "| M=2048,N=32000 | 10.00 | 10.10 | +1.00% | 12.00 | 12.00 | +0.00% |" in text  # table 2
    assert "| plain | 2.00 | 1.00x |" in text and "| CUPTI kernel trace (NVIDIA keep metric) | 3.00 | 1.50x |" in text
    assert ("cupti+ncu merged trace report" in text) is not quick
    assert ("| M=302592,N=197 | 12.00 | 9.00 | -25.00% | 9.90 | -17.50% |" in text) is not quick
