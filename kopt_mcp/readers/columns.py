"""Which columns name a config class: configured ones, or those found by elimination (neither the
metric, an error column, a measurement, nor a column that changes from run to run or describes the
machine: `never_config`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where a CSV is read, keeping server start fast
    import pandas as pd

from kopt_mcp.config import BenchmarkSection
from kopt_mcp.readers.records import PYTEST_BENCHMARK_NOT_CONFIG

MEASUREMENT_PREFIXES = ("us_", "ms_", "ns_", "s_", "time", "tflops", "gflops", "gbps", "gb_s", "bw", "speedup")


# measurement rather than the problem): matched on name tokens, and on values below.
_NEVER_CONFIG_NAME = re.compile(
    r"(^|[_.\s-])(time|timestamp|date|datetime|created|updated|ts|version|commit|sha|git|revision|host|hostname|"
    r"node|machine|gpu|gpus|device|uuid|unit|units|p\d{1,3}|q\d|quantile|quantiles|percentile|percentiles|pct\d+|"
    r"median|mean|avg|average|std|stddev|stdev|iqr|rounds|iterations|iters|reps|repeats|samples|outliers|"
    r"y_value)($|[_.\s-])", re.IGNORECASE)
_MIN_MAX_NAME = re.compile(r"(^|[_.\s-])(min|max)($|[_.\s-])", re.IGNORECASE)  # a statistic only if fractional
_TIMESTAMP_VALUE = re.compile(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}|$)")
_VERSION_VALUE = re.compile(r"^v?\d+\.\d+\.\d+([.+-][0-9A-Za-z.+-]*)?$")
_GPU_VALUE = re.compile(r"\b(NVIDIA|GeForce|Tesla|Quadro|RTX|Radeon|Instinct|AMD|MI\d{3}[A-Z]?|H100|H200|A100)\b")


def never_config(name: str, values: pd.Series) -> str | None:
    """Why column `name` (with `values`) is never a found config column, or None if it may be one.

    Timestamps, versions, percentile/quantile and summary-statistic columns (min/max only when
    fractional: `max_seq_len` stays config), repetition counts, GPU/host/device names, units; by name (`timestamp`, `liger_version`, `y_value_20`, `gpu_name`, `metric_unit`) or by value
    (`2024-09-03 15:31:39`, `0.2.1`, `NVIDIA H100 80GB HBM3`); a non-integral float column named
    `..._<number>` (a percentile such as `latency_99`).
    """
    if _NEVER_CONFIG_NAME.search(name):
        return "its name marks a timestamp, version, statistic, unit or machine column"
    vals = values.dropna()
    if vals.empty:
        return "it is empty"
    if vals.dtype.kind == "f" and re.search(r"_\d{1,2}$", name) and not (vals % 1 == 0).all():
        return "a percentile column"
    if vals.dtype.kind == "f" and _MIN_MAX_NAME.search(name) and not (vals % 1 == 0).all():
        return "a min/max statistic"
    if vals.dtype.kind in "OSU" or str(vals.dtype) in ("string", "str"):
        text = vals.astype(str)
        for rx, why in ((_TIMESTAMP_VALUE, "timestamps"), (_VERSION_VALUE, "versions"), (_GPU_VALUE, "GPU names")):
            if text.map(lambda v, rx=rx: bool(rx.search(v))).all():
                return f"its values are {why}"
    return None


_ERROR_NAME = re.compile(r"(^err|(^|[_.])(err|errs|error|errors|mismatch|mismatches|max_abs_err|rel_err)($|[_.]))", re.I)


def is_error_column(c: str, bench: BenchmarkSection) -> bool:
    """Error columns: the correctness columns, names starting with `err`, or with an err/error/mismatch
    token (`max_abs_err`, `extra_info.err`, `num_mismatches`)."""
    return c in bench.correctness_columns or bool(_ERROR_NAME.search(c))


#: a column name's trailing unit, as triton.testing.perf_report writes it: "triton (GB/s)" -> " (GB/s)"
_UNIT_SUFFIX = re.compile(r"\s\([^()]+\)$")


def found_config_columns(df: pd.DataFrame, bench: BenchmarkSection, fmt: str = "csv") -> list[str]:
    """Config columns: configured ones, or those that are neither metric, error, measurement (also a
    column carrying the metric's unit suffix, another provider's `torch (GB/s)` beside the metric
    `triton (GB/s)`), nor a `never_config` column (nor, for long CSVs, the metric-name/value/unit columns; for
    pytest-benchmark, `fullname`/`param`/`stats.*`/`options.*`/`extra_info.*`; for stdout, columns
    of non-integral numbers, the other providers' measurements of a printed table)."""
    if bench.config_columns:
        return list(bench.config_columns)
    skip = {bench.metric, *bench.correctness_columns, bench.metric_name_column, bench.value_column, bench.unit_column}
    if bench.correctness:  # columns the correctness expression reads are measurements, not config
        skip |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bench.correctness)) & set(map(str, df.columns))
    unit = _UNIT_SUFFIX.search(bench.metric)
    cols = []
    for c in df.columns:
        c = str(c)
        if c in skip or c.startswith("__") or is_error_column(c, bench) or c.lower().startswith(MEASUREMENT_PREFIXES):
            continue
        if unit and c.endswith(unit.group(0)):
            continue  # another provider's measurement in the metric's unit (perf_report: "torch (GB/s)")
        if fmt == "pytest-benchmark" and c.startswith(PYTEST_BENCHMARK_NOT_CONFIG):
            continue
        if fmt == "stdout" and df[c].dtype.kind == "f" and not (df[c].dropna() % 1 == 0).all():
            continue  # a printed table's measured columns (perf_report: one per provider)
        if never_config(c, df[c]) is None:
            cols.append(c)
    return cols
