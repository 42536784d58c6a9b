"""Installed size of kopt-mcp and each distribution it pulls in, in a fresh venv (MB of site-packages).

Usage (takes a few minutes, needs the package index):
    python -m venv /tmp/fpvenv && /tmp/fpvenv/bin/pip install .
    /tmp/fpvenv/bin/python benchmarks/dependency_footprint/run.py [--out FILE.md]
Sizes are the sum of the files each distribution's RECORD lists; "pulled in by" names the
distributions that require it (no extras), so a direct dependency's whole subtree can be read off.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import sys
from pathlib import Path

BUILD_TOOLS = {"pip", "setuptools", "wheel"}


def footprint() -> list[tuple[str, str, float, list[str]]]:
    """(name, version, MB, required by) per installed distribution, largest first."""
    required_by: dict[str, list[str]] = {}
    for d in md.distributions():
        for r in d.requires or []:
            if "extra ==" not in r:
                name = re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0].lower().replace("_", "-")
                required_by.setdefault(name, []).append(d.metadata["Name"])
    rows = []
    for d in md.distributions():
        size = sum(p.stat().st_size for p in (Path(str(d.locate_file(f))) for f in d.files or []) if p.is_file())
        name = d.metadata["Name"]
        rows.append((name, d.version, size / 1e6, sorted(set(required_by.get(name.lower().replace("_", "-"), [])))))
    return sorted(rows, key=lambda r: -r[2])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown table here")
    args = ap.parse_args()
    rows = footprint()
    total = sum(r[2] for r in rows if r[0].lower() not in BUILD_TOOLS)
    lines = [f"Python {sys.version.split()[0]}; {len(rows)} distributions; total without pip/setuptools: "
             f"**{total:.1f} MB**", "", "| distribution | version | MB | pulled in by |", "|---|---|---:|---|"]
    lines += [f"| {n} | {v} | {mb:.1f} | {', '.join(by) or '-'} |" for n, v, mb, by in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
