"""The reader protocol and the result-file record every reader and `readers.metrics` share."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel

if TYPE_CHECKING:
    import pandas as pd


class Reader(Protocol):
    """One result format. `name` is the `[benchmark] format` value it serves."""

    name: str

    def frame(self, content: bytes, source: str) -> pd.DataFrame:
        """Rows of `content` (from `source`, a file name for messages). Raises ReaderError."""
        ...


class ResultFile(BaseModel):
    """One result file of a run: its content before the run (None: it did not exist) and after."""

    path: str
    before: bytes | None = None
    after: bytes
    tracked: bool = False  # tracked by git in the run's tree: rows left unchanged by the run are stale

    @property
    def name(self) -> str:
        return Path(self.path).name

    @classmethod
    def load(cls, path: Path, before: bytes | None = None, tracked: bool = False) -> ResultFile:
        """The file at `path` as it is now, with `before` (its bytes captured before the run)."""
        return cls(path=str(path), before=before, after=path.read_bytes(), tracked=tracked)


def numeric_where_possible(df: pd.DataFrame) -> pd.DataFrame:
    """Columns whose every non-empty value parses as a number become numeric (others unchanged)."""
    import pandas as pd

    for c in df.columns:
        if df[c].dtype.kind in "biuf":
            continue
        conv = pd.to_numeric(df[c], errors="coerce")
        if conv.notna().sum() == df[c].notna().sum() and df[c].notna().any():
            df[c] = conv
    return df
