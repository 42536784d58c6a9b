"""JSON readers: a list of records, or pytest-benchmark's `--benchmark-json` file."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from kopt_mcp.errors import ReaderError

if TYPE_CHECKING:
    import pandas as pd

# pytest-benchmark: columns that describe a benchmark but are no config (the name already holds the params)
PYTEST_BENCHMARK_NOT_CONFIG = ("fullname", "param", "stats.", "options.", "extra_info.")


def _records(data: object, source: str) -> list[dict]:
    if isinstance(data, dict):
        lists = [v for v in data.values() if isinstance(v, list) and v and all(isinstance(r, dict) for r in v)]
        if "benchmarks" in data and isinstance(data["benchmarks"], list):
            return data["benchmarks"]
        if len(lists) == 1:
            return lists[0]
        raise ReaderError(f"{source}: a JSON object must hold exactly one list of records (found {len(lists)}): "
                          "write a list of objects, one per measured config")
    if isinstance(data, list) and all(isinstance(r, dict) for r in data):
        return data
    raise ReaderError(f"{source}: expected a JSON list of objects (one per measured config), got {type(data).__name__}")


class JsonReader:
    """`format = "json"` / `"pytest-benchmark"`: records flattened with dotted names
    (`stats.median`, `params.M`); pytest-benchmark times are in seconds."""

    def __init__(self, pytest_benchmark: bool = False) -> None:
        self.name = "pytest-benchmark" if pytest_benchmark else "json"

    def frame(self, content: bytes, source: str) -> pd.DataFrame:
        """The records as rows. Raises ReaderError for invalid JSON or no list of records."""
        import pandas as pd

        try:
            data = json.loads(content.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ReaderError(f"{source} is not valid JSON ({e}): fix the benchmark's writer") from e
        if isinstance(data, dict) and "benchmarks" in data and "machine_info" in data:
            self.name = "pytest-benchmark"
        return pd.json_normalize(_records(data, source), sep=".")
