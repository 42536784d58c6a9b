"""Metric files: freshness, parsing, correctness, config classes, improvement sign."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest

from kopt_mcp.config import BenchmarkSection
from kopt_mcp.errors import MetricsError
from kopt_mcp.readers.metrics import class_key, fresh_csvs, read_metrics
from kopt_mcp.rules.percent import improvement_pct


def bench(**kw) -> BenchmarkSection:
    base = dict(command="python bench.py", csv="*.csv", metric="us", correctness_columns=["err"])
    base.update(kw)
    return BenchmarkSection(**base)


def csv(tmp_path: Path, text: str, name: str = "out.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# --- fresh_csvs -------------------------------------------------------------------------------


def test_fresh_csvs_without_match_names_the_pattern(tmp_path):
    with pytest.raises(MetricsError, match=r"results/\*\.csv"):
        fresh_csvs(tmp_path, "results/*.csv", time.time())


def test_fresh_csvs_ignores_directories_matching_the_pattern(tmp_path):
    (tmp_path / "dir.csv").mkdir()
    with pytest.raises(MetricsError, match="no file matching"):
        fresh_csvs(tmp_path, "*.csv", 0.0)


def test_stale_csv_is_rejected(tmp_path):
    p = csv(tmp_path, "us,err\n1,0\n")
    old = time.time() - 3600
    os.utime(p, (old, old))
    with pytest.raises(MetricsError, match="stale"):
        fresh_csvs(tmp_path, "*.csv", time.time() - 60)


def test_csv_written_after_start_is_fresh(tmp_path):
    started = time.time() - 1
    p = csv(tmp_path, "us,err\n1,0\n")
    assert fresh_csvs(tmp_path, "*.csv", started) == [p]


def test_only_fresh_files_are_returned_when_some_are_stale(tmp_path):
    started = time.time() - 1
    stale = csv(tmp_path, "us,err\n1,0\n", "a.csv")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    fresh = csv(tmp_path, "us,err\n1,0\n", "b.csv")
    assert fresh_csvs(tmp_path, "*.csv", started) == [fresh]


def test_fresh_csvs_matches_recursive_glob(tmp_path):
    started = time.time() - 1
    (tmp_path / "a" / "b").mkdir(parents=True)
    p = csv(tmp_path / "a" / "b", "us,err\n1,0\n")
    assert fresh_csvs(tmp_path, "**/*.csv", started) == [p]


# --- class keys ---------------------------------------------------------------------------------


def test_class_key_prints_integral_floats_as_ints():
    assert class_key(["M", "N", "dtype"], [4096.0, 128, "float16"]) == "M=4096,N=128,dtype=float16"


def test_class_key_keeps_fractional_floats():
    assert class_key(["alpha"], [0.5]) == "alpha=0.5"


def test_class_key_without_columns_is_all():
    assert class_key([], []) == "all"


# --- read_metrics -------------------------------------------------------------------------------


def test_classes_are_keyed_col_eq_value_in_csv_order(tmp_path):
    p = csv(tmp_path, "M,N,us,err\n4096,128,10.0,0\n1024,64,5.0,0\n")
    t = read_metrics([p], bench(config_columns=["M", "N"]))
    assert [c.key for c in t.classes] == ["M=4096,N=128", "M=1024,N=64"]
    assert t.values() == {"M=4096,N=128": 10.0, "M=1024,N=64": 5.0}


def test_integral_float_config_values_print_as_ints(tmp_path):
    # a NaN elsewhere in the column makes pandas read M as float
    p = csv(tmp_path, "M,us,err\n4096.0,10.0,0\n,11.0,0\n")
    t = read_metrics([p], bench(config_columns=["M"]))
    assert [c.key for c in t.classes] == ["M=4096", "M=nan"]


def test_metric_is_the_median_of_repeated_rows(tmp_path):
    p = csv(tmp_path, "M,us,err\n1,10.0,0\n1,30.0,0\n1,11.0,0\n2,5.0,0\n")
    t = read_metrics([p], bench(config_columns=["M"]))
    c = {c.key: c for c in t.classes}
    assert c["M=1"].metric == 11.0 and c["M=1"].rows == 3
    assert c["M=2"].metric == 5.0 and c["M=2"].rows == 1


def test_config_columns_found_when_not_configured(tmp_path):
    p = csv(tmp_path,
            "M,dtype,us,err,err_max,us_min,ms_total,time_s,tflops,gbps,speedup,Error\n"
            "64,fp16,10.0,0,0.0,9.0,1.0,1.0,1.0,1.0,1.0,0\n")
    t = read_metrics([p], bench())
    assert t.config_columns == ["M", "dtype"]
    assert [c.key for c in t.classes] == ["M=64,dtype=fp16"]


def test_found_columns_exclude_configured_correctness_columns(tmp_path):
    p = csv(tmp_path, "M,us,mismatches\n64,10.0,0\n128,12.0,0\n")
    t = read_metrics([p], bench(correctness_columns=["mismatches"]))
    assert t.config_columns == ["M"]


def test_no_config_columns_gives_one_class_all(tmp_path):
    p = csv(tmp_path, "us,err\n10.0,0\n12.0,0\n")
    t = read_metrics([p], bench())
    assert [(c.key, c.metric, c.rows) for c in t.classes] == [("all", 11.0, 2)]


def test_rows_of_several_files_are_combined(tmp_path):
    a = csv(tmp_path, "M,us,err\n1,10.0,0\n", "a.csv")
    b = csv(tmp_path, "M,us,err\n2,20.0,0\n", "b.csv")
    t = read_metrics([a, b], bench())
    assert t.values() == {"M=1": 10.0, "M=2": 20.0}
    assert t.files == [str(a), str(b)]


def test_header_whitespace_is_stripped(tmp_path):
    p = csv(tmp_path, "M, us, err\n1,10.0,0\n")
    assert read_metrics([p], bench()).values() == {"M=1": 10.0}


def test_missing_metric_column_lists_the_columns(tmp_path):
    p = csv(tmp_path, "M,ms,err\n1,10.0,0\n")
    with pytest.raises(MetricsError) as ei:
        read_metrics([p], bench())
    msg = str(ei.value)
    assert "['us']" in msg and "'M'" in msg and "'ms'" in msg and "'err'" in msg


def test_missing_configured_config_column_is_an_error(tmp_path):
    p = csv(tmp_path, "M,us,err\n1,10.0,0\n")
    with pytest.raises(MetricsError, match="'K'"):
        read_metrics([p], bench(config_columns=["M", "K"]))


def test_missing_correctness_column_is_an_error(tmp_path):
    p = csv(tmp_path, "M,us\n1,10.0\n")
    with pytest.raises(MetricsError, match="'err'"):
        read_metrics([p], bench())


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", ""])
def test_non_finite_metric_is_an_error(tmp_path, value):
    p = csv(tmp_path, f"M,us,err\n1,10.0,0\n2,{value},0\n")
    with pytest.raises(MetricsError, match="NaN, inf or not a number in 1 row"):
        read_metrics([p], bench())


def test_non_numeric_metric_is_an_error(tmp_path):
    p = csv(tmp_path, "M,us,err\n1,10.0,0\n2,fast,0\n")
    with pytest.raises(MetricsError, match="row 2, value 'fast'"):
        read_metrics([p], bench())


def test_integer_metric_column_is_accepted(tmp_path):
    p = csv(tmp_path, "M,ns,err\n1,1200,0\n2,3400,0\n")
    t = read_metrics([p], bench(metric="ns"))
    assert t.values() == {"M=1": 1200.0, "M=2": 3400.0}


def test_header_only_csv_is_an_error(tmp_path):
    p = csv(tmp_path, "M,us,err\n")
    with pytest.raises(MetricsError, match="header but no rows"):
        read_metrics([p], bench())


def test_empty_file_is_an_error(tmp_path):
    p = csv(tmp_path, "")
    with pytest.raises(MetricsError, match="not a readable CSV"):
        read_metrics([p], bench())


def test_nonzero_correctness_column_marks_only_its_class_incorrect(tmp_path):
    p = csv(tmp_path, "M,us,err\n1,10.0,0\n1,10.0,0\n2,20.0,0\n2,20.0,3\n")
    t = read_metrics([p], bench())
    assert t.failing() == ["M=2"]
    assert t.correct is False
    assert {c.key: c.errors["err"] for c in t.classes} == {"M=1": 0.0, "M=2": 3.0}


def test_all_zero_correctness_columns_are_correct(tmp_path):
    p = csv(tmp_path, "M,us,err\n1,10.0,0\n2,20.0,0.0\n")
    t = read_metrics([p], bench())
    assert t.correct is True and t.failing() == []


def test_negative_error_value_is_incorrect(tmp_path):
    p = csv(tmp_path, "M,us,err\n1,10.0,-1\n")
    assert read_metrics([p], bench()).failing() == ["M=1"]


def test_missing_error_value_is_incorrect(tmp_path):
    p = csv(tmp_path, "M,us,err\n1,10.0,\n2,10.0,0\n")
    assert read_metrics([p], bench()).failing() == ["M=1"]


def test_correctness_expression_is_evaluated_per_row(tmp_path):
    p = csv(tmp_path, "M,us,max_abs_err\n1,10.0,0.0001\n2,20.0,0.5\n")
    t = read_metrics([p], bench(correctness_columns=[], correctness="max_abs_err < 1e-3", config_columns=["M"]))
    assert t.failing() == ["M=2"]


def test_found_columns_exclude_columns_of_the_correctness_expression(tmp_path):
    p = csv(tmp_path, "M,us,max_abs_err\n1,10.0,0.0001\n2,20.0,0.0002\n")
    t = read_metrics([p], bench(correctness_columns=[], correctness="max_abs_err < 1e-3"))
    assert t.config_columns == ["M"]


def test_correctness_expression_and_columns_both_apply(tmp_path):
    p = csv(tmp_path, "M,us,err,rel\n1,10.0,1,0.0\n2,20.0,0,0.9\n3,30.0,0,0.0\n")
    t = read_metrics([p], bench(correctness="rel < 0.1", config_columns=["M"]))
    assert t.failing() == ["M=1", "M=2"]


def test_bad_correctness_expression_is_a_metrics_error(tmp_path):
    p = csv(tmp_path, "M,us,err\n1,10.0,0\n")
    with pytest.raises(MetricsError, match="cannot be evaluated"):
        read_metrics([p], bench(correctness="no_such_column < 1"))


def test_syntax_error_in_correctness_expression_is_a_metrics_error(tmp_path):
    p = csv(tmp_path, "M,us,err\n1,10.0,0\n")
    with pytest.raises(MetricsError, match="cannot be evaluated"):
        read_metrics([p], bench(correctness="err <"))


def test_table_records_metric_direction_and_files(tmp_path):
    p = csv(tmp_path, "M,tflops,err\n1,100.0,0\n")
    t = read_metrics([p], bench(metric="tflops", higher_is_better=True))
    assert (t.metric, t.higher_is_better, t.files) == ("tflops", True, [str(p)])


# --- improvement_pct ------------------------------------------------------------------------------


def test_lower_is_better_faster_is_positive():
    assert improvement_pct(100.0, 90.0, higher_is_better=False) == pytest.approx(10.0)


def test_lower_is_better_slower_is_negative():
    assert improvement_pct(100.0, 110.0, higher_is_better=False) == pytest.approx(-10.0)


def test_higher_is_better_larger_is_positive():
    assert improvement_pct(100.0, 110.0, higher_is_better=True) == pytest.approx(10.0)


def test_higher_is_better_smaller_is_negative():
    assert improvement_pct(100.0, 90.0, higher_is_better=True) == pytest.approx(-10.0)


def test_equal_values_are_zero():
    assert improvement_pct(42.0, 42.0, False) == 0.0
    assert improvement_pct(0.0, 0.0, True) == 0.0


def test_zero_best_gives_signed_infinity():
    assert improvement_pct(0.0, 1.0, higher_is_better=True) == math.inf
    assert improvement_pct(0.0, 1.0, higher_is_better=False) == -math.inf


def test_failing_errors_give_the_error_numbers_of_each_failing_class(tmp_path):
    p = csv(tmp_path, "M,us,err,max_abs_err\n1,10,0,0.0\n2,20,3,0.25\n2,21,1,-0.5\n")
    t = read_metrics([p], bench(config_columns=["M"]))
    assert t.failing() == ["M=2"]
    assert t.failing_errors() == {"M=2": {"err": 3.0, "max_abs_err": 0.5}}
    assert t.failing_summary() == "M=2 (err=3, max_abs_err=0.5)"
