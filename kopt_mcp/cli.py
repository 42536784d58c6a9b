"""The `kopt-mcp` command: `serve` (stdio, or streamable HTTP with --http), `demo`, `check-config`, `init`, `--version`.

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
    s = sub.add_parser("serve", help="run the MCP server for one kernel repository (stdio; --http for remote use)")
    s.add_argument("--repo", type=Path, default=Path.cwd(), help="the kernel repository (default: cwd)")
    s.add_argument("--config", type=Path, default=None, help="config file (default: <repo>/kopt.toml)")
    s.add_argument("--tag", default=None, help="session tag: branch kernel-opt/<tag> (default: today's date)")
    h = s.add_argument_group("streamable HTTP (remote use)")
    h.add_argument("--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    h.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1; a non-loopback host "
                   "needs a token)")
    h.add_argument("--port", type=int, default=8765, help="port to bind (default: 8765)")
    h.add_argument("--token-env", default="KOPT_MCP_TOKEN", metavar="NAME",
                   help="environment variable holding the bearer token (default: KOPT_MCP_TOKEN)")
    h.add_argument("--token-file", type=Path, default=None, metavar="PATH",
                   help="file whose first line is the bearer token (mode 600; overrides --token-env)")
    d = sub.add_parser("demo", help="the whole loop on a bundled example, driven over stdio")
    d.add_argument("--example", choices=["auto", "cpu", "triton"], default="auto",
                   help="auto: triton when torch+triton+an NVIDIA GPU are present, else cpu")
    d.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it (default: a temp dir)")
    c = sub.add_parser("check-config", help="validate a config against the repository and print what it found")
    c.add_argument("--repo", type=Path, default=Path.cwd())
    c.add_argument("--config", type=Path, default=None)
    i = sub.add_parser("init", help="run the repository's own benchmark twice and propose a commented kopt.toml")
    i.add_argument("--repo", type=Path, default=Path.cwd())
    i.add_argument("--command", default=None, help="the benchmark command (run twice in --repo); else --results")
    i.add_argument("--results", default=None, metavar="GLOB", help="the result file (choose one, or read one "
                   "already there when no --command is given)")
    for flag in ("kernel", "provider", "mode", "metric-name"):
        i.add_argument(f"--{flag}", default=None, help=f"the {flag.replace('-', ' ')} whose rows count")
    i.add_argument("--write", action="store_true", help="write <repo>/kopt.toml instead of printing it")
    i.add_argument("--force", action="store_true", help="with --write: replace an existing kopt.toml")
    return p


def _serve(args: argparse.Namespace) -> int:
    from kopt_mcp.config import ConfigError
    from kopt_mcp.referee import Referee, RefereeError
    from kopt_mcp.server import build_server
    from kopt_mcp.vcs import VcsError

    token = None
    if args.http:
        from kopt_mcp.http import TokenError, check_policy, resolve_token

        try:
            token = resolve_token(args.token_env, args.token_file)
            for warning in check_policy(args.host, token):
                print(f"kopt-mcp serve: warning: {warning}", file=sys.stderr)
        except TokenError as e:
            print(f"kopt-mcp serve: {e}", file=sys.stderr)
            return 2
    try:
        ref = Referee(args.repo, args.config, args.tag)
    except (ConfigError, RefereeError, VcsError) as e:
        print(f"kopt-mcp serve: {e}", file=sys.stderr)
        return 2
    if args.http:
        from kopt_mcp.http import serve_http

        serve_http(build_server(ref), args.host, args.port, token)
    else:
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
    if args.cmd == "init":
        from kopt_mcp.init import run_init

        return run_init(args.repo, args.command, args.results, args.kernel, args.provider, args.mode,
                        args.metric_name, args.write, args.force)
    from kopt_mcp.check import check_config

    return check_config(args.repo, args.config)


if __name__ == "__main__":
    sys.exit(main())
