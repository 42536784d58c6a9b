"""`kopt-mcp compare`: what a session achieved, measured (referee.gain.measure_session_gain) from the
command line: two commits, by default the session's baseline commit and BEST_COMMIT, in one paired run
on one lease under the session's rules.

It opens the session's main slot like `serve` does (the one-server-per-repository lock): while a
server runs on the repository, ask its agent to call the tool measure_session_gain instead, or stop
the server first.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kopt_mcp.commands.report import pick_session
from kopt_mcp.errors import KoptError


def _say(done: float, total: float, message: str) -> None:
    print(f"kopt-mcp compare: {message}", file=sys.stderr, flush=True)


def open_session(repo: Path, tag: str | None, command: str, tool: str):
    """The Referee of session `tag` (default: the most recently active main slot) of `repo`, opened
    like `serve` opens it, for the CLI subcommand `command` (its name in messages); None after saying
    on stderr why not (no folder, no such session, a server holds the repository: then its agent can
    call the tool `tool` instead)."""
    repo = repo.resolve()
    if not repo.is_dir():
        print(f"kopt-mcp {command}: {repo} is no folder: pass the kernel repository with --repo", file=sys.stderr)
        return None
    found = pick_session(repo, tag, command, "pass --tag", main_only=True)
    if found is None:
        return None
    # lazy: start-up time: the referee (git, pandas, the profilers) loads only for a session that exists
    from kopt_mcp.referee import Referee

    try:
        return Referee(repo, None, str(found[1]["tag"]))
    except (KoptError, OSError) as e:
        print(f"kopt-mcp {command}: {e}. While a server runs on this repository, its agent can call the tool "
              f"{tool} instead", file=sys.stderr)
        return None


def compare_command(repo: Path, tag: str | None, base: str | None, head: str | None, as_json: bool) -> int:
    """Measure `head` (default BEST_COMMIT) against `base` (default the session's baseline commit) in
    session `tag` (default: the most recently active one) of `repo`; print the result (text, or the
    SessionGainResult as JSON with `as_json`) on stdout, progress on stderr. Exit code 0, or 2 with
    the reason on stderr (no such session, a server holds the repository, no device, a failed run)."""
    ref = open_session(repo, tag, "compare", "measure_session_gain")
    if ref is None:
        return 2
    try:
        result = ref.measure_session_gain(base, head, progress=_say)
    except KoptError as e:
        print(f"kopt-mcp compare: {e}", file=sys.stderr)
        return 2
    finally:
        ref.close()
    if as_json:
        print(result.model_dump_json(indent=1))
        return 0
    print(result.headline)
    print(f"{'config class':<24} {'base':>12} {'head':>12} {'change':>9} {'ratio':>8}  bounds")
    for c in result.classes:
        iv = c.interval
        bounds = (f"{iv.lo_pct:+.2f}% .. {iv.hi_pct:+.2f}%" if iv and iv.lo_pct is not None and iv.hi_pct is not None
                  else "unknown")
        ratio = f"{c.ratio_x:.2f}x" if c.ratio_x is not None else "-"
        print(f"{c.key:<24} {c.base:>12.4g} {c.head:>12.4g} {c.mean_pct:>+8.2f}% {ratio:>8}  {bounds}")
    print(f"GPU time: {result.gpu_note}")
    for w in result.warnings:
        print(f"warning: {w}")
    return 0
