"""CSV readers: wide (one row per config, the metric a column) and long (one row per metric)."""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from kopt_mcp.errors import ReaderError

if TYPE_CHECKING:
    import pandas as pd


def read_csv_bytes(content: bytes, source: str) -> pd.DataFrame:
    """A CSV's rows (header stripped of spaces). Raises ReaderError for unreadable or empty CSVs."""
    import pandas as pd

    try:
        df = pd.read_csv(io.BytesIO(content))
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ReaderError(f"{source} is not a readable CSV ({e}): fix the benchmark's writer") from e
    df.columns = [str(c).strip() for c in df.columns]
    return df


class CsvReader:
    """`format = "csv"`: a wide CSV."""

    name = "csv"

    def frame(self, content: bytes, source: str) -> pd.DataFrame:
        """All rows of the CSV."""
        return read_csv_bytes(content, source)


class LongCsvReader:
    """`format = "csv-long"`: rows whose `name_column` equals `metric`; their `value_column` becomes
    a column named `metric` (e.g. Liger-Kernel: metric_name = "speed", value y_value_50, ms)."""

    name = "csv-long"

    def __init__(self, name_column: str, value_column: str, metric: str) -> None:
        self.name_column, self.value_column, self.metric = name_column, value_column, metric

    def frame(self, content: bytes, source: str) -> pd.DataFrame:
        """The rows of metric `metric`, with its value in column `metric`. Raises ReaderError when the
        name or value column is missing or no row names the metric (listing the names seen)."""
        df = read_csv_bytes(content, source)
        missing = [c for c in (self.name_column, self.value_column) if c not in df.columns]
        if missing:
            raise ReaderError(f"column(s) {missing} not in {source}; its columns are {list(df.columns)}: fix "
                              "[benchmark] metric_name_column / value_column")
        names = df[self.name_column].astype(str)
        if df.empty:
            return df.assign(**{self.metric: df[self.value_column]})
        sel = df[names == self.metric].copy()
        if sel.empty:
            raise ReaderError(f"no row of {source} has {self.name_column} == {self.metric!r}; names seen: "
                              f"{sorted(names.unique())[:20]}: set [benchmark] metric to one of them")
        sel[self.metric] = sel[self.value_column]
        return sel
