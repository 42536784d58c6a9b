"""The `kopt-mcp` command: `serve` (stdio, or streamable HTTP with --http), `demo`, `check-config`, `init`, `report`,
`compare`, `end-session`, `--version`.

Nothing is printed to stdout before the server runs (stdout is the MCP channel); errors go to stderr.
A session that cannot open (bad repository or config, another server on the repository) does not end
`serve`: the server still answers, `status` says phase `unconfigured` with the problem and its fix, every other
tool returns the error (clients hide stderr), and the exit
status is 2 when the client disconnects.

Subcommands are added in `_parser` (one `sub.add_parser` block each) and dispatched in `main`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from kopt_mcp import __version__
from kopt_mcp.app.logs import add_logging_args, setup_logging
from kopt_mcp.errors import (
    ConfigError,
    KoptError,
    PreflightError,
    ReaderError,
    RefereeError,
    StartupError,
    TokenError,
    VcsError,
)


def _repo_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", type=Path, default=Path.cwd(), metavar="PATH",
                   help="the kernel repository, a git checkout with at least one commit (default: cwd)")
    p.add_argument("--config", type=Path, default=None, metavar="PATH",
                   help="the target config, TOML (default: <repo>/kopt.toml)")


def _tool_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one tool name, e.g. --tools status,run_benchmark")
    return names


def _check_config_options(sub) -> None:
    """`kopt-mcp check-config`'s options: --repo, --config and --run (kopt_mcp/commands/check_config.py)."""
    c = sub.add_parser("check-config", help="validate a config against the repository and print what it found",
                       description="Validate a config against the repository and print what it found; "
                       "exit 0 when usable, 2 otherwise.")
    _repo_options(c)
    c.add_argument("--run", action="store_true", help="run the benchmark once in place (result files put back as they "
                   "were) and preview only the rows it writes; warn about classes the result files hold that it never "
                   "writes (without it, committed or older result files are not previewed)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kopt-mcp", description="MCP server that referees GPU-kernel optimization loops.")
    p.add_argument("--version", action="version", version=f"kopt-mcp {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    _serve_parser(sub)
    _demo_parser(sub)
    _check_config_options(sub)
    _report_parser(sub)
    _session_parsers(sub)
    _init_parser(sub)
    _rejudge_parser(sub)
    return p


def _serve_parser(sub) -> None:
    """`serve`: the repository and session, which tools, streamable HTTP, logging."""
    s = sub.add_parser("serve", help="run the MCP server for one kernel repository (stdio; --http for remote use)",
                       description="Run the MCP server for one kernel repository (stdio by default).")
    _repo_options(s)
    s.add_argument("--tag", default=None, help="session tag: branch kernel-opt/<tag> (default: today's date)")
    s.add_argument("--slot", default=None, metavar="NAME",
                   help="join the session as another agent: candidate slot NAME (own workspace, repair counter and "
                   "pending verdict; one BEST line for all); `auto`: a fresh name for this process (default: the "
                   "main slot)")
    t = s.add_argument_group("which tools to expose (default: all)")
    t.add_argument("--tools", type=_tool_list, default=None, metavar="A,B,C",
                   help="expose only these tools, comma-separated (e.g. status,run_benchmark,plot_progress)")
    t.add_argument("--read-only", action="store_true",
                   help="expose only the read-only tools (status, get_attempt, plot_progress, optimization_knowledge, "
                   "measure_session_gain): for watching a session, e.g. through the MCP Inspector")
    h = s.add_argument_group("streamable HTTP (remote use)")
    h.add_argument("--http", action="store_true", help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio")
    h.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1; a non-loopback host "
                   "needs a token)")
    h.add_argument("--port", type=int, default=8765, help="port to bind (default: 8765)")
    h.add_argument("--token-env", default="KOPT_MCP_TOKEN", metavar="NAME",
                   help="environment variable holding the bearer token (default: KOPT_MCP_TOKEN)")
    h.add_argument("--token-file", type=Path, default=None, metavar="PATH",
                   help="file whose first line is the bearer token (mode 600; overrides --token-env)")
    add_logging_args(s)


def _demo_parser(sub) -> None:
    """`demo`: the bundled example, its folder, how many agents."""
    d = sub.add_parser("demo", help="the whole loop on a bundled example, driven over stdio",
                       description="Run the whole loop on a bundled example kernel, driven by a scripted MCP client.")
    d.add_argument("--example", choices=["auto", "cpu", "triton"], default="auto",
                   help="auto: triton when torch+triton+an NVIDIA GPU are present, else cpu")
    d.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="work in this folder and keep it (default: a temp dir)")
    d.add_argument("--agents", type=int, default=1, metavar="N",
                   help="3: three scripted agents at once, one candidate slot each, on the CPU example "
                   "(default 1: the single-agent demo)")


def _report_parser(sub) -> None:
    """`report`: a session's HTML report."""
    r = sub.add_parser("report", help="write a session's report as one self-contained HTML page")
    r.add_argument("--repo", type=Path, default=Path.cwd(), help="the kernel repository (default: cwd)")
    r.add_argument("--tag", default=None, help="session tag (default: the most recently active session)")
    r.add_argument("--out", type=Path, default=None, help="HTML file to write (default: report.html in the "
                   "session's state folder); its path is printed")


def _session_parsers(sub) -> None:
    """`compare` and `end-session`: measure a session's gain, or end it."""
    m = sub.add_parser("compare", help="measure what a session achieved: its baseline commit against BEST_COMMIT in one "
                       "paired run under the session's rules",
                       description="Measure two commits (default: the session's baseline commit against BEST_COMMIT) "
                       "in one paired run on one leased device under the session's rules; per config class the change "
                       "with its bounds, GPU time where a profiler exists. Recorded in the session's ledger (the Stop "
                       "Summary's and the report's headline). Exit 0, or 2 with the reason on stderr.")
    m.add_argument("--repo", type=Path, default=Path.cwd(), help="the kernel repository (default: cwd)")
    m.add_argument("--tag", default=None, help="session tag (default: the most recently active session)")
    m.add_argument("--base", default=None, metavar="REV", help="the commit to measure against (default: the "
                   "session's baseline commit)")
    m.add_argument("--head", default=None, metavar="REV", help="the commit to measure (default: BEST_COMMIT)")
    m.add_argument("--json", action="store_true", help="print the result as JSON (SessionGainResult)")
    e = sub.add_parser("end-session", help="end a session on purpose: measure its gain, write and commit the Stop "
                       "Summary (reason: ended by the agent)",
                       description="End session --tag (default: the most recently active) of --repo as the tool "
                       "end_session does: measure its baseline commit against BEST_COMMIT in one paired run, write the "
                       "Stop Summary (reason `ended by the agent`) to performance.md and commit it on the session's "
                       "branch. Refused while a candidate is pending or the workspace has untested edits, and while a "
                       "server runs on the repository (ask its agent to call end_session). Exit 0, or 2 with the "
                       "reason on stderr.")
    e.add_argument("--repo", type=Path, default=Path.cwd(), help="the kernel repository (default: cwd)")
    e.add_argument("--tag", default=None, help="session tag (default: the most recently active session)")
    e.add_argument("--why", default="", help="why it ends, one sentence (joins the stop reason)")
    e.add_argument("--json", action="store_true", help="print the result as JSON (EndSessionResult)")


def _init_parser(sub) -> None:
    """`init`: the benchmark and result flags, the correctness run, the time budget, writing."""
    i = sub.add_parser("init", help="run the repository's own benchmark twice and its tests once, and propose a "
                       "commented kopt.toml")
    i.add_argument("--repo", type=Path, default=Path.cwd(), metavar="PATH",
                   help="the kernel repository, a git checkout (default: cwd)")
    i.add_argument("--command", default=None, help="the benchmark command (run twice in --repo); else --results")
    i.add_argument("--results", default=None, metavar="GLOB", help="the result file (choose one, or read one "
                   "already there when no --command is given)")
    for flag in ("kernel", "provider", "mode", "metric-name"):
        i.add_argument(f"--{flag}", default=None, help=f"the {flag.replace('-', ' ')} whose rows count")
    i.add_argument("--correctness", default=None, metavar="CMD",
                   help="the correctness command to propose instead of the one init finds (init runs it once: it "
                   "must pass on the unmodified tree)")
    i.add_argument("--tests-timeout", type=float, default=300.0, metavar="S",
                   help="time limit (s) of each of init's runs of the correctness command (default 300: it runs "
                   "once per candidate); a run cut there while still finishing tests keeps the ones it finished")
    i.add_argument("--no-run-tests", action="store_true",
                   help="do not run the correctness command: the proposal says so and is printed, never written")
    i.add_argument("--budget", type=float, default=600.0, metavar="S",
                   help="time (s) for the whole of init (default 600): each run gets what is left; what it could not "
                   "check is marked NOT CHECKED in the proposal, with the command to run by hand")
    i.add_argument("--test-timeout", type=float, default=60.0, metavar="S",
                   help="per-test limit (s) of init's runs of the tests, where pytest-timeout is installed; a test "
                   "past it is dropped as too slow (default 60; 0: none)")
    i.add_argument("--write", action="store_true", help="write <repo>/kopt.toml instead of printing it (after an "
                   "init with the same flags on the same tree: the proposal it showed, without running again)")
    i.add_argument("--fresh", action="store_true", help="with --write: run everything again, not the saved proposal")
    i.add_argument("--force", action="store_true", help="with --write: replace an existing kopt.toml")


def _rejudge_parser(sub) -> None:
    """`rejudge`: a recorded attempt decided again from its run folders."""
    j = sub.add_parser("rejudge", help="decide a recorded attempt again under today's rules, from its run folders "
                       "(nothing runs): why was this a tie?")
    j.add_argument("state_dir", type=Path, help="the session's state folder (status shows it: "
                   "<git-common-dir>/kopt/<tag>)")
    j.add_argument("--attempt", type=int, required=True, help="the attempt's number")
    j.add_argument("--config", type=Path, default=None, help="a kopt.toml to judge with (default: the session's)")
    j.add_argument("--json", action="store_true", help="one JSON object: verdict, code, gpu_floor_pct, "
                   "gpu_delta_pct, per-class rows, the recorded verdict")
    j.add_argument("--keep-metric", choices=["auto", "groups"], default="auto",
                   help="auto: today's rule (by harness unit where the traces have units); groups: the "
                   "launch-group rule before units, to compare on the same traces")


def open_session(repo: Path, config: Path | None, tag: str | None, slot: str | None = None):
    """The session's Referee (of candidate slot `slot`; "auto": a fresh name per process; None:
    the main slot), or the StartupError that says why it could not open (never raises for a bad
    repository, config, git state or a second server on the same slot)."""
    # lazy: start-up time: each subcommand loads only what it uses
    from kopt_mcp.app.tools.errors import error_text

    args = f"--repo {repo}" + (f" --config {config}" if config is not None else "")
    if not repo.exists():
        return StartupError(f"the repository {repo} does not exist: pass --repo with the path of the kernel's "
                            "git checkout", fix=f"{_SERVE_ARGS}, then {RESTART}")
    if not repo.is_dir():
        return StartupError(f"--repo {repo} is a file, not a folder: pass the kernel's git checkout",
                            fix=f"{_SERVE_ARGS}, then {RESTART}")
    if config is not None and not config.exists():
        return StartupError(f"the config {config} does not exist: pass --config with a kopt.toml "
                            "(see `kopt-mcp check-config --help`)",
                            fix=f"write it (`kopt-mcp init --repo {repo} --command CMD` proposes one) or fix --config, "
                            f"check it with `kopt-mcp check-config {args}`, then {RESTART}")
    try:
        # lazy: start-up time: each subcommand loads only what it uses
        from kopt_mcp.referee import Referee

        if slot == "auto":
            slot = f"agent-{os.getpid()}"
        return Referee(repo, config, tag, slot=slot)
    except Exception as e:  # every start-up failure becomes the text every tool returns
        return StartupError(f"kopt-mcp could not open a session on {repo}: {error_text(e, repo, 'serve')}",
                            fix=startup_fix(e, repo, args))


#: the last step of every start-up fix: a session opens only when the server starts
RESTART = "restart the MCP server (reconnect it in the client, e.g. /mcp in Claude Code): the session opens at start"
_SERVE_ARGS = "point --repo of the server's command (the client's MCP config) at the kernel's git checkout"


def startup_fix(e: BaseException, repo: Path, args: str) -> str:
    """What to do so a session that failed to open with `e` opens (status's `fix`); `args`: the
    --repo/--config words `kopt-mcp check-config` needs."""
    check = f"`kopt-mcp check-config {args}` shows what it finds"
    if isinstance(e, PreflightError):
        what = (f"fix the command or workdir the problem names in kopt.toml ([benchmark] command / workdir, "
                f"[correctness] command) or install what it lacks, commit kopt.toml; {check}")
    elif isinstance(e, (ConfigError, ReaderError)):
        what = f"fix kopt.toml as the problem says and commit it; {check}"
    elif isinstance(e, VcsError):
        what = (f"make {repo} a git checkout with at least one commit (`git init && git add -A && git commit -m "
                f"init`), or {_SERVE_ARGS}")
    elif isinstance(e, RefereeError):
        what = "do what the problem says (stop the other server, pass --slot NAME or another --tag, restore kopt.toml)"
    else:
        what = f"fix what the problem names; {check}"
    return f"{what}; then {RESTART}"


def _end_session(repo: Path, tag: str | None, why: str, as_json: bool) -> int:
    """`kopt-mcp end-session`: the tool end_session on session `tag` (default: the most recently active
    main slot) of `repo`, opened like `serve` opens it. Prints the Stop Summary (or the result as JSON)
    on stdout, progress on stderr. Exit 0, or 2 with the reason on stderr."""
    # lazy: start-up time: each subcommand loads only what it uses
    from kopt_mcp.commands.compare import open_session

    ref = open_session(repo, tag, "end-session", "end_session")
    if ref is None:
        return 2
    try:
        result = ref.end_session(why, progress=lambda _d, _t, m: print(f"kopt-mcp end-session: {m}", file=sys.stderr,
                                                                         flush=True))
    except KoptError as e:
        print(f"kopt-mcp end-session: {e}", file=sys.stderr)
        return 2
    finally:
        ref.close()
    print(result.model_dump_json(indent=1) if as_json else result.summary.rstrip())
    return 0


def _serve(args: argparse.Namespace) -> int:
    # lazy: start-up time: each subcommand loads only what it uses
    from kopt_mcp.app.server import build_server
    from kopt_mcp.app.tools import select_tools  # lazy: start-up time

    setup_logging(args)
    try:
        select_tools(args.tools, args.read_only)
    except ValueError as e:
        print(f"kopt-mcp serve: --tools: {e}", file=sys.stderr)
        return 2
    token = None
    if args.http:
        # lazy: start-up time: each subcommand loads only what it uses
        from kopt_mcp.app.http import check_policy, resolve_token

        try:
            token = resolve_token(args.token_env, args.token_file)
            for warning in check_policy(args.host, token):
                print(f"kopt-mcp serve: warning: {warning}", file=sys.stderr)
        except TokenError as e:
            print(f"kopt-mcp serve: {e}", file=sys.stderr)
            return 2
    ref = open_session(args.repo, args.config, args.tag, args.slot)
    if isinstance(ref, StartupError):
        print(f"kopt-mcp serve: {ref}\nkopt-mcp serve: still serving, so the client can show this error: status "
              "shows it with its fix, every other tool returns it", file=sys.stderr, flush=True)
    mcp = build_server(ref, args.tools, args.read_only, slot_per_session=args.http)
    if args.http:
        # lazy: start-up time: each subcommand loads only what it uses
        from kopt_mcp.app.http import serve_http

        serve_http(mcp, args.host, args.port, token)
    else:
        # lazy: start-up time: each subcommand loads only what it uses
        from kopt_mcp.app.stdio import serve_stdio

        # EOF on stdin (the client closed it or died) cancels the running operations and ends the server
        serve_stdio(mcp, None if isinstance(ref, StartupError) else ref.where.pid_dir)
    return 2 if isinstance(ref, StartupError) else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.cmd == "serve":
        return _serve(args)
    if args.cmd == "report":
        # lazy: start-up time: each subcommand loads only what it uses
        from kopt_mcp.commands.report import report_command

        return report_command(args.repo, args.tag, args.out)
    if args.cmd == "compare":
        # lazy: start-up time: each subcommand loads only what it uses
        from kopt_mcp.commands.compare import compare_command

        return compare_command(args.repo, args.tag, args.base, args.head, args.json)
    if args.cmd == "end-session":
        return _end_session(args.repo, args.tag, args.why, args.json)
    if args.cmd == "demo":
        if args.agents != 1:
            # lazy: start-up time: each subcommand loads only what it uses
            from kopt_mcp.commands.demo_agents import run_agents_demo

            if args.example == "triton":
                parser.error("--agents runs on the CPU example only: leave out --example triton")
            try:
                return run_agents_demo(args.agents, args.keep)
            except ValueError as e:
                parser.error(str(e))
        # lazy: start-up time: each subcommand loads only what it uses
        from kopt_mcp.commands.demo import run_demo

        return run_demo(args.example, args.keep)
    if args.cmd == "rejudge":
        # lazy: start-up time: each subcommand loads only what it uses
        from kopt_mcp.commands.rejudge import rejudge_command

        return rejudge_command(args.state_dir, args.attempt, args.config, args.json, args.keep_metric)
    if args.cmd == "init":
        # lazy: start-up time: each subcommand loads only what it uses
        from kopt_mcp.commands.init.propose import run_init

        return run_init(args.repo, args.command, args.results, args.kernel, args.provider, args.mode,
                        args.metric_name, args.write, args.force, args.correctness, not args.no_run_tests,
                        args.tests_timeout, args.budget, args.test_timeout or None, args.fresh)
    # lazy: start-up time: each subcommand loads only what it uses
    from kopt_mcp.commands.check_config import check_config

    if not args.repo.is_dir():
        what = "does not exist" if not args.repo.exists() else "is not a folder"
        print(f"kopt-mcp check-config: the repository {args.repo} {what}: pass --repo with the kernel's git "
              "checkout", file=sys.stderr)
        return 2
    return check_config(args.repo, args.config, args.run)


if __name__ == "__main__":
    sys.exit(main())
