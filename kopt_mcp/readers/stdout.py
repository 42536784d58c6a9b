"""The run log as results: a regex with named groups (one match per row), or the last table printed:
markdown pipes; a header over a rule of dashes with columns two or more spaces apart, so that names
and cells may hold single spaces (FlagGems' pytest performance suite, tabulate's "simple" format); or
whitespace-aligned, as pandas / `triton.testing.perf_report` print it."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kopt_mcp.errors import ReaderError
from kopt_mcp.readers.base import numeric_where_possible

if TYPE_CHECKING:
    import pandas as pd

_MD_RULE = re.compile(r"^\|?\s*:?-{3,}")
_DASH_RULE = re.compile(r"^[-\s]{10,}$")
_GAP = re.compile(r"\s{2,}")


def _is_num(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


def _markdown_table(lines: list[str]) -> tuple[list[str], list[list[str]]] | None:
    found, i = None, 0
    while i < len(lines):
        if lines[i].lstrip().startswith("|") and i + 1 < len(lines) and _MD_RULE.match(lines[i + 1].strip()):
            head = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            rows, j = [], i + 2
            while j < len(lines) and lines[j].lstrip().startswith("|"):
                cells = [c.strip() for c in lines[j].strip().strip("|").split("|")]
                if len(cells) == len(head):
                    rows.append(cells)
                j += 1
            if rows:
                found = (head, rows)
            i = j
        else:
            i += 1
    return found


def _ruled_table(lines: list[str]) -> tuple[list[str], list[list[str]]] | None:
    """The last table whose header line stands over a rule of dashes, columns 2+ spaces apart; rows
    are the following lines with as many cells, at least one numeric."""
    found = None
    for i in range(len(lines) - 2):
        rule = lines[i + 1].strip()
        if not (rule and "-" in rule and _DASH_RULE.match(rule)):
            continue
        head = _GAP.split(lines[i].strip())
        if len(head) < 2 or any(_is_num(h) for h in head):
            continue
        rows = []
        for line in lines[i + 2:]:
            cells = _GAP.split(line.strip())
            if len(cells) != len(head) or not any(_is_num(c) for c in cells):
                break
            rows.append(cells)
        if rows:
            found = (head, rows)
    return found


def _whitespace_table(lines: list[str]) -> tuple[list[str], list[list[str]]] | None:
    found, i = None, 0
    while i < len(lines):
        head = lines[i].split()
        rows, j = [], i + 1
        if len(head) >= 2 and not any(_is_num(t) for t in head):
            while j < len(lines):
                f = lines[j].split()
                if len(f) == len(head) + 1 and f[0].isdigit():  # a printed DataFrame's index
                    f = f[1:]
                if len(f) != len(head) or not any(_is_num(t) for t in f):
                    break
                rows.append(f)
                j += 1
        if rows:
            found = (head, rows)
            i = j
        else:
            i += 1
    return found


class StdoutReader:
    """`format = "stdout"`: rows from the benchmark's log."""

    name = "stdout"

    def __init__(self, pattern: str = "") -> None:
        self.pattern = pattern

    def frame(self, content: bytes, source: str) -> pd.DataFrame:
        """Rows from `content` (the log). Raises ReaderError when the regex never matches or no table
        (a header line followed by rows of as many fields, at least one numeric) is found."""
        import pandas as pd

        text = content.decode("utf-8", errors="replace")
        if self.pattern:
            rows = [m.groupdict() for m in re.finditer(self.pattern, text, re.MULTILINE)]
            if not rows:
                raise ReaderError(f"[benchmark] stdout_pattern matched nothing in {source}: compare it with the log")
            return numeric_where_possible(pd.DataFrame(rows))
        lines = text.splitlines()
        table = _markdown_table(lines) or _ruled_table(lines) or _whitespace_table(lines)
        if table is None:
            raise ReaderError(f"no table found in {source} (a header line, then rows with as many fields): "
                              "set [benchmark] stdout_pattern to a regex with named groups")
        head, rows = table
        return numeric_where_possible(pd.DataFrame(rows, columns=head))
