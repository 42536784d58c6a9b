"""Model-visible size of tools/list: kopt-mcp next to mcp-server-git (issue 12 target: at most 1.5x).

Model-visible = per tool the JSON of {name, description, inputSchema} (what a client puts in the
model's context; outputSchema and annotations are counted apart). Both servers are spawned over stdio
with the official client and asked tools/list. mcp-server-git lives in its own venv:
    python -m venv /tmp/gitvenv && /tmp/gitvenv/bin/pip install mcp-server-git
Usage: python benchmarks/tools_list_size/run.py [--git-server /tmp/gitvenv/bin/mcp-server-git] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from datetime import date
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

from kopt_mcp.testing.toy import make_toy_repo

TARGET_RATIO = 1.5


def visible_chars(tool: dict) -> int:
    """Characters of the model-visible part of one tool: name, description, input schema (compact JSON)."""
    part = {"name": tool["name"], "description": tool.get("description") or "",
            "inputSchema": tool.get("inputSchema") or {}}
    return len(json.dumps(part, separators=(",", ":"), ensure_ascii=False))


async def list_tools(command: list[str]) -> list[dict]:
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with Client(params) as c:
        return [t.model_dump(by_alias=True, exclude_none=True) for t in (await c.list_tools()).tools]


def table(name: str, tools: list[dict]) -> tuple[int, list[str]]:
    rows = [f"| {t['name']} | {len(t.get('description') or '')} | "
            f"{len(json.dumps(t.get('inputSchema') or {}, separators=(',', ':')))} | {visible_chars(t)} |"
            for t in sorted(tools, key=lambda t: t["name"])]
    total = sum(visible_chars(t) for t in tools)
    return total, [f"### {name}: {len(tools)} tools, {total} characters", "",
                   "| tool | description | inputSchema | visible total |", "|---|---:|---:|---:|", *rows, ""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--git-server", default="/tmp/gitvenv/bin/mcp-server-git", help="the mcp-server-git executable")
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown result here (default: stdout only)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        repo = make_toy_repo(Path(d) / "repo", {"1": 100.0})
        os.environ.setdefault("KOPT_LEASE_DIR", str(Path(d) / "leases"))
        kopt = anyio.run(list_tools, [sys.executable, "-m", "kopt_mcp.app.cli", "serve", "--repo", str(repo),
                                      "--tag", "size"])
        git = anyio.run(list_tools, [args.git_server, "--repository", str(repo)])
    kt, klines = table("kopt-mcp", kopt)
    gt, glines = table("mcp-server-git", git)
    ratio = kt / gt
    out_schema = sum(len(json.dumps(t.get("outputSchema") or {}, separators=(",", ":"))) for t in kopt)
    lines = [f"# tools/list size, model-visible part ({date.today().isoformat()})", "",
             "Per tool: compact JSON of {name, description, inputSchema}, as spawned over stdio by the official "
             "client (`python benchmarks/tools_list_size/run.py`).", "",
             f"- kopt-mcp: **{kt}** characters ({len(kopt)} tools)",
             f"- mcp-server-git: **{gt}** characters ({len(git)} tools)",
             f"- ratio: **{ratio:.2f}x** (target <= {TARGET_RATIO}x: {'met' if ratio <= TARGET_RATIO else 'NOT met'})",
             f"- not counted above: kopt-mcp's outputSchemas, {out_schema} characters (validated by clients, "
             "not shown to the model)", "", *klines, *glines]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
