"""Result readers (kopt_mcp/readers) through metrics.read_results: formats, the rows filter, stale
rows of appended/tracked files, units, config columns never found. Real recorded outputs live in
tests/fixtures/readers/ (see each *.source.txt)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from kopt_mcp.config import BenchmarkSection
from kopt_mcp.errors import MetricsError
from kopt_mcp.readers import ResultFile
from kopt_mcp.readers.metrics import capture_before, collect_results, never_config, read_results

FIX = Path(__file__).parents[1] / "fixtures" / "readers"
LIGER = (FIX / "liger_all_benchmark_data_head.csv").read_bytes()
PYBENCH = (FIX / "pytest_benchmark_2.5.json").read_bytes()


def bench(**kw) -> BenchmarkSection:
    base = dict(command="python bench.py", csv="*.csv", metric="us", correctness_columns=[])
    base.update(kw)
    return BenchmarkSection(**base)


def liger(**kw) -> BenchmarkSection:
    base = dict(csv="data/all_benchmark_data.csv", format="csv-long", metric="speed",
                metric_name_column="metric_name", value_column="y_value_50")
    base.update(kw)
    return bench(**base)


def rf(content: bytes, name: str = "out.csv", before: bytes | None = None, tracked: bool = False) -> ResultFile:
    return ResultFile(path=f"/x/{name}", before=before, after=content, tracked=tracked)


# --- long CSV (Liger-Kernel's all_benchmark_data.csv) ------------------------------------------------


def test_liger_long_csv_with_rows_filter_gives_one_class_per_shape_and_mode():
    t = read_results([rf(LIGER)], liger(rows="kernel_name == 'cross_entropy' and kernel_provider == 'liger'"))
    assert t.format == "csv-long" and t.unit == "ms"
    assert len(t.classes) == 12  # 2 modes x 6 vocab sizes
    # constant within the selected rows: kernel_name, provider, x_name, x_label, the extra config;
    # never config: timestamp, liger_version, gpu_name, y_value_20/80, metric_unit
    assert t.config_columns == ["kernel_operation_mode", "x_value"]
    first = t.classes[0]
    assert first.key == "kernel_operation_mode=forward,x_value=4096"
    assert first.metric == pytest.approx(0.5324159860610962)


def test_a_metric_column_with_several_units_is_an_error_naming_them():
    b = bench(csv="a.csv", metric="y_value_50", rows="kernel_provider == 'liger'")
    with pytest.raises(MetricsError, match=r"mixes units.*ms \(12 rows\), MB \(6 rows\)"):
        read_results([rf(LIGER)], b)


def test_a_rows_query_that_selects_nothing_lists_the_values_seen():
    with pytest.raises(MetricsError, match=r"selects none.*kernel_provider: \['huggingface', 'liger'\]"):
        read_results([rf(LIGER)], liger(rows="kernel_provider == 'ours'"))


def test_a_bad_rows_query_names_the_columns():
    with pytest.raises(MetricsError, match=r"rows = .* cannot be evaluated.*kernel_provider"):
        read_results([rf(LIGER)], liger(rows="kernel_provider ==="))


def test_long_csv_without_the_metric_name_lists_the_names_seen():
    with pytest.raises(MetricsError, match=r"names seen: \['memory', 'speed'\]"):
        read_results([rf(LIGER)], liger(metric="latency"))


# --- stale rows -------------------------------------------------------------------------------------


def test_a_tracked_file_left_unchanged_is_stale_and_failed_with_the_rows_and_the_cause():
    with pytest.raises(MetricsError, match=r"stale results: all 12 counted row\(s\).*row 1 .*--overwrite"):
        read_results([rf(LIGER, before=LIGER, tracked=True)], liger(rows="kernel_provider == 'liger'"))


def test_a_tracked_file_where_the_run_rewrote_some_rows_counts_only_those():
    lines = LIGER.decode().splitlines(keepends=True)
    lines[1] = lines[1].replace("0.5324159860610962", "0.4").replace("15:31:39", "23:59:59")
    t = read_results([rf("".join(lines).encode(), before=LIGER, tracked=True)],
                     liger(rows="kernel_provider == 'liger'"))
    assert t.values() == {t.classes[0].key: 0.4} and t.stale_rows == 11
    assert "11 counted row(s) were left unchanged" in t.warnings[0]


def test_an_appended_untracked_file_counts_only_the_appended_rows():
    header, *rows = LIGER.decode().splitlines(keepends=True)
    before = (header + "".join(rows[:6])).encode()
    new = rows[0].replace("0.5324159860610962", "0.3").replace("15:31:39", "23:00:00")
    after = before + new.encode()
    t = read_results([rf(after, before=before)], liger(rows="kernel_provider == 'liger'"))
    assert list(t.values().values()) == [0.3] and t.stale_rows == 6


def test_an_untracked_file_rewritten_with_the_same_values_counts_whole():
    # a deterministic benchmark may write identical values twice; only tracked or appended files go stale
    t = read_results([rf(LIGER, before=LIGER)], liger(rows="kernel_provider == 'liger'"))
    assert len(t.classes) == 12 and t.stale_rows == 0


def test_capture_before_marks_tracked_files_and_collect_pairs_them(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "all_benchmark_data.csv").write_bytes(LIGER)
    subprocess.run(["git", "-C", str(tmp_path), "add", "."], check=True)
    b = liger(rows="kernel_provider == 'liger'")
    before = capture_before(tmp_path, b)
    assert [v[1] for v in before.values()] == [True]
    started = time.time()
    time.sleep(0.02)
    (tmp_path / "data" / "all_benchmark_data.csv").write_bytes(LIGER)  # rewritten, every row kept
    files = collect_results(tmp_path, b, started, before)
    assert files[0].tracked and files[0].before == LIGER
    with pytest.raises(MetricsError, match="stale results"):
        read_results(files, b)


# --- JSON ----------------------------------------------------------------------------------------


def test_pytest_benchmark_json_reads_stats_median_in_seconds():
    b = bench(csv="bench.json", format="auto", metric="stats.median")
    t = read_results([rf(PYBENCH, "bench.json")], b)
    assert t.format == "pytest-benchmark" and t.unit == "s"
    assert t.config_columns == ["name"]  # group is null; fullname, param, stats.*, options.* are no config
    assert t.values() == {"name=test_xfast_parametrized[0]": pytest.approx(2.2016379230260297e-07)}


def test_a_json_list_of_records_with_an_error_field():
    content = b'[{"M": 1024, "us": 10.5, "err_max": 0.0}, {"M": 2048, "us": 20.0, "err_max": 0.5}]'
    t = read_results([rf(content, "r.json")], bench(csv="r.json", correctness="err_max < 0.1"))
    assert t.values() == {"M=1024": 10.5, "M=2048": 20.0}
    assert t.failing_errors() == {"M=2048": {"err_max": 0.5}}


def test_json_that_is_no_list_of_records_says_what_to_write():
    with pytest.raises(MetricsError, match="list of objects"):
        read_results([rf(b'"hello"', "r.json")], bench(csv="r.json"))


# --- stdout -----------------------------------------------------------------------------------------

PERF_REPORT = b"""compiling...
softmax-performance:
          N      Triton       Torch
0     256.0  150.057230  120.118430
1     384.0  210.000000  160.000000
2     512.0  260.500000  190.250000
done
"""


def test_stdout_table_as_a_printed_dataframe():
    b = bench(csv="", format="stdout", metric="Triton", higher_is_better=True, correctness_columns=[])
    t = read_results([rf(PERF_REPORT, "benchmark.log")], b)
    assert t.config_columns == ["N"] and t.values() == {"N=256": 150.05723, "N=384": 210.0, "N=512": 260.5}


def test_stdout_markdown_table_and_unit_suffix():
    log = b"| shape | time | errors |\n|---|---|---|\n| 4096 | 1.5 ms | 0 |\n| 8192 | 2.5 ms | 0 |\n"
    t = read_results([rf(log, "benchmark.log")], bench(csv="", format="stdout", metric="time",
                                                          correctness_columns=["errors"]))
    assert t.values() == {"shape=4096": 1.5, "shape=8192": 2.5} and t.unit == "ms"


def test_stdout_regex_with_named_groups():
    log = b"M=1024 time 3.0 us err 0\nM=2048 time 5.0 us err 0\n"
    b = bench(csv="", format="stdout", metric="us", correctness_columns=["err"],
              stdout_pattern=r"M=(?P<M>\d+) time (?P<us>[\d.]+) us err (?P<err>\d+)")
    assert read_results([rf(log, "benchmark.log")], b).values() == {"M=1024": 3.0, "M=2048": 5.0}


def test_mixed_unit_suffixes_are_an_error():
    log = b"| shape | time |\n|---|---|\n| 1 | 1.5 ms |\n| 2 | 900 us |\n"
    with pytest.raises(MetricsError, match=r"mixes units.*ms \(1 rows\), us \(1 rows\)"):
        read_results([rf(log, "benchmark.log")], bench(csv="", format="stdout", metric="time"))


FLAGGEMS = (FIX / "flaggems_rms_norm_perf.log").read_bytes()


def test_stdout_table_under_a_rule_with_spaced_names_flaggems():
    b = bench(csv="", format="stdout", metric="Gems Latency (ms)", config_columns=["Size Detail"])
    t = read_results([rf(FLAGGEMS, "benchmark.log")], b)
    assert t.values()["Size Detail=[torch.Size([1024, 65536]), [65536], torch.Size([65536])]"] == 0.588032
    assert len(t.values()) == 5 and t.unit is None


def test_the_pytest_header_is_no_table():
    from kopt_mcp.readers.stdout import StdoutReader

    df = StdoutReader().frame(FLAGGEMS, "benchmark.log")
    assert list(df.columns) == ["Status", "Torch Latency (ms)", "Gems Latency (ms)", "Gems Speedup", "Size Detail"]


def test_stdout_without_a_table_asks_for_a_pattern():
    with pytest.raises(MetricsError, match="stdout_pattern"):
        read_results([rf(b"hello\nworld\n", "benchmark.log")], bench(csv="", format="stdout"))


# --- config columns never found ------------------------------------------------------------------


@pytest.mark.parametrize("name,values", [
    ("timestamp", ["2024-09-03 15:31:39"]), ("when", ["2024-09-03T15:31:39"]), ("liger_version", ["0.2.1"]),
    ("pkg", ["0.2.1"]), ("y_value_20", [0.52]), ("latency_99", [1.25]), ("p50", [3]), ("gpu_name", ["x"]),
    ("dev", ["NVIDIA H100 80GB HBM3"]), ("metric_unit", ["ms"]), ("stats.median", [1.0]), ("reps", [812]),
    ("time_max", [1.25]),
])
def test_never_config_columns(name, values):
    import pandas as pd

    assert never_config(name, pd.Series(values)) is not None


@pytest.mark.parametrize("name,values", [("x_value", [4096]), ("M", [1024]), ("dtype", ["float16"]),
                                         ("kernel_provider", ["liger"]), ("alpha", [0.5]), ("max_seq_len", [2048])])
def test_config_columns_still_found(name, values):
    import pandas as pd

    assert never_config(name, pd.Series(values)) is None


# --- config keys ------------------------------------------------------------------------------------


def test_csv_long_needs_its_columns():
    with pytest.raises(ValueError, match="metric_name_column"):
        bench(format="csv-long")


def test_stdout_pattern_must_name_the_metric():
    with pytest.raises(ValueError, match=r"\(\?P<us>"):
        bench(csv="", format="stdout", stdout_pattern=r"(?P<time>\d+)")


def test_capture_before_in_a_snapshot_checkout_without_git_counts_files_as_tracked(tmp_path):
    (tmp_path / "out.csv").write_bytes(b"M,us\n1,2.5\n")
    b = bench(csv="*.csv")
    assert [t for _, t in capture_before(tmp_path, b).values()] == [False]  # no repository: not known
    assert [t for _, t in capture_before(tmp_path, b, all_tracked=True).values()] == [True]


# --- triton.testing.perf_report: one same-named file per mode, a column per provider ----------------

TK_PERF_REPORT = (FIX / "triton_perf_report_rms_norm.csv").read_bytes()


def test_same_shaped_files_of_several_folders_are_classes_of_their_own():
    b = bench(csv="results/*/rms-norm.csv", metric="triton (GB/s)", higher_is_better=True)
    files = [ResultFile(path=f"/run/results/{m}/rms-norm.csv", after=TK_PERF_REPORT) for m in ("bwd", "fwd")]
    t = read_results(files, b)
    assert t.config_columns == ["result_file", "seq_len"]  # not the other providers' "(GB/s)" columns
    assert len(t.classes) == 32 and t.classes[0].key == "result_file=bwd/rms-norm.csv,seq_len=256"
    assert t.values()["result_file=fwd/rms-norm.csv,seq_len=4096"] == pytest.approx(2907.998996)
    configured = read_results(files, bench(csv="results/*/rms-norm.csv", metric="triton (GB/s)",
                                           config_columns=["seq_len"]))
    assert len(configured.classes) == 32  # configured columns alone would merge fwd and bwd rows


def test_files_of_distinct_classes_combine_without_a_file_column():
    b = bench(csv="results/*.csv", metric="triton (GB/s)", config_columns=["seq_len"])
    lines = TK_PERF_REPORT.decode().splitlines(keepends=True)
    head, rows = lines[0], lines[1:]
    files = [ResultFile(path="/run/results/a.csv", after=(head + "".join(rows[:8])).encode()),
             ResultFile(path="/run/results/b.csv", after=(head + "".join(rows[8:])).encode())]
    t = read_results(files, b)
    assert t.config_columns == ["seq_len"] and len(t.classes) == 16
