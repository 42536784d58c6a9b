"""Server start-to-ready time of `kopt-mcp serve` over stdio (issue target: under 1 s).

Ready = the official mcp client's connection is initialized (the server answered); then one
tools/list. Measured for a first start (creates the worktrees) and a resumed session, N times
each, on a toy repository. Usage: python benchmarks/startup/run.py [N] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from kopt_mcp.testing.toy import make_toy_repo


async def one(repo: Path, tag: str) -> tuple[float, float]:
    exe = shutil.which("kopt-mcp")
    cmd = [exe] if exe and not os.environ.get("KOPT_STARTUP_MODULE") else [sys.executable, "-m", "kopt_mcp.app.cli"]
    params = StdioServerParameters(command=cmd[0], args=[*cmd[1:], "serve", "--repo", str(repo), "--tag", tag],
                                   env=dict(os.environ))  # the SDK passes a minimal env otherwise
    t0 = time.perf_counter()
    async with Client(params) as c:
        ready = time.perf_counter() - t0
        await c.list_tools()
        listed = time.perf_counter() - t0
    return ready, listed


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        repo = make_toy_repo(Path(tmp) / "repo", {"1": 100.0})
        for kind in ("first start", "resume"):
            ready, listed = [], []
            for i in range(args.n):
                tag = f"fresh{i}" if kind == "first start" else "resumed"
                r, ls = anyio.run(one, repo, tag)
                ready.append(r)
                listed.append(ls)
            rows.append((kind, statistics.median(ready), min(ready), max(ready), statistics.median(listed)))
    lines = [f"# kopt-mcp serve start-to-ready, {date.today()}", "",
             f"host: {platform.node()}, {platform.machine()}, Python {platform.python_version()}, "
             f"{args.n} runs each", "",
             "| start | ready median (s) | min (s) | max (s) | ready + tools/list median (s) |", "|---|---|---|---|---|"]
    lines += [f"| {k} | {m:.3f} | {lo:.3f} | {hi:.3f} | {ls:.3f} |" for k, m, lo, hi, ls in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
