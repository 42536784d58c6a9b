"""The `kopt-mcp` command: `serve` (stdio MCP server), `demo`, `check-config`, `--version`.

Nothing is printed to stdout before the server runs (stdout is the MCP channel); errors go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kopt_mcp import __version__


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kopt-mcp", description="MCP server that referees GPU-kernel optimization loops.")
    p.add_argument("--version", action="version", version=f"kopt-mcp {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve", help="run the MCP server over stdio for one kernel repository")
    s.add_argument("--repo", type=Path, default=Path.cwd(), help="the kernel repository (default: cwd)")
    s.add_argument("--config", type=Path, default=None, help="config file (default: <repo>/kopt.toml)")
    s.add_argument("--tag", default=None, help="session tag: branch kernel-opt/<tag> (default: today's date)")
    d = sub.add_parser("demo", help="the whole loop on a bundled example, driven over stdio")
    d.add_argument("--example", choices=["auto", "cpu", "triton"], default="auto",
                   help="auto: triton when torch+triton+an NVIDIA GPU are present, else cpu")
    d.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a temp dir)")
    c = sub.add_parser("check-config", help="validate a config against the repository and print what it found")
    c.add_argument("--repo", type=Path, default=Path.cwd())
    c.add_argument("--config", type=Path, default=None)
    return p


def _serve(args: argparse.Namespace) -> int:
    from kopt_mcp.config import ConfigError
    from kopt_mcp.referee import Referee, RefereeError
    from kopt_mcp.server import build_server
    from kopt_mcp.vcs import VcsError

    try:
        ref = Referee(args.repo, args.config, args.tag)
    except (ConfigError, RefereeError, VcsError) as e:
        print(f"kopt-mcp serve: {e}", file=sys.stderr)
        return 2
    build_server(ref).run("stdio")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    args = _parser().parse_args(argv)
    if args.cmd == "serve":
        return _serve(args)
    if args.cmd == "demo":
        from kopt_mcp.demo import run_demo

        return run_demo(args.example, args.keep)
    from kopt_mcp.check import check_config

    return check_config(args.repo, args.config)


if __name__ == "__main__":
    sys.exit(main())
