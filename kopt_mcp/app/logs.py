"""Logging: `serve -v` / `--log-file` (phases on stderr or in a file) and the MCP logging capability.

- `add_logging_args(parser)` / `setup_logging(args)`: the CLI side. `-v` logs each phase of a tool
  call (benchmark run k of n, profiling, GPU waits) to stderr, `-vv` also every heartbeat;
  `--log-file PATH` appends both to PATH. stdout is never touched (it is the MCP channel on stdio).
- `serve_mcp_logging(mcp)`: answers `logging/setLevel` (and so advertises the `logging`
  capability); `send_log(ctx, level, text)` sends a `notifications/message` to the calling client
  when `level` is at or above the level that client set (default `info`).

The logging capability is deprecated by the 2026-07-28 protocol revision; clients that negotiate
an earlier version (the TypeScript SDK 1.x, the Inspector, Claude Code) use it. On 2026-07-28
connections the SDK delivers request-scoped log messages only where the request opted in.
"""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
import weakref
from pathlib import Path
from typing import Any

LOGGER = "kopt_mcp"
# MCP's LoggingLevel values in RFC 5424 order, least severe first
LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")
DEFAULT_CLIENT_LEVEL = "info"
FORMAT = "%(asctime)s kopt-mcp %(levelname)s %(message)s"

_client_levels: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def add_logging_args(parser: argparse.ArgumentParser) -> None:
    """Add `-v/--verbose` (count) and `--log-file PATH` to the `serve` parser."""
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="log each phase of a tool call to stderr (-vv: also every progress heartbeat)")
    parser.add_argument("--log-file", type=Path, default=None, metavar="PATH",
                        help="append the phase log (with heartbeats) to PATH")


def setup_logging(args: argparse.Namespace) -> None:
    """Configure the `kopt_mcp` logger from `-v` and `--log-file` (before the server is built).

    Without either, only warnings reach stderr. Raises OSError when the log file cannot be opened.
    """
    verbose, log_file = getattr(args, "verbose", 0) or 0, getattr(args, "log_file", None)
    logger = logging.getLogger(LOGGER)
    logger.propagate = False  # the SDK's root handler would print everything a second time
    for h in list(logger.handlers):
        logger.removeHandler(h)
        h.close()
    fmt = logging.Formatter(FORMAT)
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.DEBUG if verbose >= 2 else logging.INFO if verbose == 1 else logging.WARNING)
    stderr.setFormatter(fmt)
    logger.addHandler(stderr)
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(log_file, encoding="utf-8")
        fh.setLevel(logging.DEBUG)
        fh.setFormatter(fmt)
        logger.addHandler(fh)
    logger.setLevel(min(h.level for h in logger.handlers))


def _connection(session: Any) -> Any:
    # the SDK builds one ServerSession per request; the level belongs to the connection behind it
    return getattr(session, "_connection", session)


def client_level(session: Any) -> str:
    """The level the client of `session` set with logging/setLevel (default 'info')."""
    try:
        return _client_levels.get(_connection(session), DEFAULT_CLIENT_LEVEL)
    except TypeError:
        return DEFAULT_CLIENT_LEVEL


def serve_mcp_logging(mcp: Any) -> None:
    """Register the `logging/setLevel` handler on an MCPServer (advertises the logging capability)."""
    from mcp.shared.exceptions import MCPDeprecationWarning
    from mcp.types import EmptyResult, SetLevelRequestParams

    # the SDK marks its logging API deprecated (2026-07-28 protocol); this server serves older clients too
    warnings.filterwarnings("ignore", message="The logging capability is deprecated", category=MCPDeprecationWarning)

    async def set_level(ctx: Any, params: Any) -> Any:
        try:
            _client_levels[_connection(ctx.session)] = params.level
        except TypeError:  # a connection object that cannot be weakly referenced: nothing to remember
            pass
        logging.getLogger(LOGGER).info("client log level set to %s", params.level)
        return EmptyResult()

    # MCPServer has no public hook for this spec method; its low-level server does
    mcp._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)


async def send_log(ctx: Any, level: str, text: str) -> None:
    """Send `text` as a `notifications/message` at `level` to the calling client, if it wants that level.

    `ctx` is the tool's MCP Context. Errors sending (a client that went away) are swallowed.
    """
    session = ctx.request_context.session
    if LEVELS.index(level) < LEVELS.index(client_level(session)):
        return
    try:
        await session.send_log_message(level=level, data=text, logger=LOGGER,
                                       related_request_id=ctx.request_context.request_id)
    except Exception:  # noqa: BLE001 - logging must never break a tool call
        pass
