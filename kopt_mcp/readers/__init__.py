"""Result readers: turn one result file's bytes (or the run log) into a table of rows.

Every reader has one method, `frame(content, source) -> pandas.DataFrame`: one row per measured
record, columns as the harness names them. A reader never decides what counts; kopt_mcp/readers/metrics.py
takes the frames of the content BEFORE and AFTER the run (stale rows), applies `[benchmark] rows`,
checks units and groups config classes.

| format | reads | reader |
|---|---|---|
| csv | a wide CSV: one row per config, the metric a column | `CsvReader` |
| csv-long | a long CSV: `metric_name_column` names the metric, `value_column` holds it | `LongCsvReader` |
| json | a list of records (or an object holding one such list) | `JsonReader` |
| pytest-benchmark | `pytest --benchmark-json` output: `stats.median` (s), `params.*` | `JsonReader` |
| stdout | the run log: a regex with named groups, or the last whitespace/markdown table | `StdoutReader` |
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kopt_mcp.errors import ReaderError
from kopt_mcp.readers.base import Reader, ResultFile, numeric_where_possible
from kopt_mcp.readers.records import JsonReader
from kopt_mcp.readers.stdout import StdoutReader
from kopt_mcp.readers.tabular import CsvReader, LongCsvReader

if TYPE_CHECKING:
    from kopt_mcp.config import BenchmarkSection


def resolve_format(bench: BenchmarkSection, source: str = "") -> str:
    """The concrete format for `source`: `[benchmark] format`, or with `auto` by suffix and keys.

    auto: no csv glob -> stdout; `.json` -> json (pytest-benchmark when its content says so,
    decided by JsonReader); metric_name_column + value_column set -> csv-long; else csv.
    """
    if bench.format != "auto":
        return bench.format
    if not bench.csv:
        return "stdout"
    if (source or bench.csv).lower().endswith(".json"):
        return "json"
    if bench.metric_name_column and bench.value_column:
        return "csv-long"
    return "csv"


def make_reader(bench: BenchmarkSection, source: str = "") -> Reader:
    """The reader for `bench` (and, with format auto, for the file named `source`)."""
    fmt = resolve_format(bench, source)
    if fmt == "csv":
        return CsvReader()
    if fmt == "csv-long":
        return LongCsvReader(bench.metric_name_column, bench.value_column, bench.metric)
    if fmt in ("json", "pytest-benchmark"):
        return JsonReader(pytest_benchmark=fmt == "pytest-benchmark")
    return StdoutReader(bench.stdout_pattern)


__all__ = ["Reader", "ReaderError", "ResultFile", "make_reader", "numeric_where_possible", "resolve_format"]
