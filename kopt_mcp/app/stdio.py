"""The stdio transport, ending with its client: a server whose stdin closes ends its runs and exits.

MCP's stdio transport ends when the client closes the server's stdin (or dies, which closes it).
At that EOF every operation of this process, running or waiting for the session lock, is cancelled
at once (referee.cancel_all: the runner kills the run's whole process tree and the operation
unwinds, its attempt archived as `cancelled`); the server waits up to END_GRACE_S for them to end,
then returns, and its lifespan closes the session (leases, server lock). A client that closes its
end of stdout first (a write fails with a broken pipe) is treated the same. Should an operation
still run after the wait (a step that does not watch its cancel event), the runs this process
recorded in the session's pid folder are killed (bench.runner.end_own_runs) and the process exits
at once (os._exit): neither the server nor a benchmark outlives its client, even as a child of init.

Built on the SDK's own pieces (mcp.server.stdio.stdio_server and the low-level server's `run`), as
MCPServer.run_stdio_async is; only the read stream is wrapped, to see the EOF before the SDK does.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server

from kopt_mcp.bench.runner import STOP_GRACE_S, end_own_runs
from kopt_mcp.referee import cancel_all, running_count

log = logging.getLogger("kopt_mcp.stdio")

#: how long (s) the running operations get to unwind after the client went away: the runner's own
#: grace for a launcher to end its tree, plus time to archive and save
END_GRACE_S = STOP_GRACE_S + 5.0


async def end_operations(why: str) -> int:
    """Cancel every running operation (`why`: for the log) and wait up to END_GRACE_S s for them to
    end. Returns how many still run after the wait."""
    n = cancel_all()
    (log.warning if n else log.info)("%s: cancelling %d running operation(s)", why, n)
    with anyio.move_on_after(END_GRACE_S):
        while running_count():
            await anyio.sleep(0.05)
    return running_count()


class _UntilEof:
    """The SDK's read stream, with `end_operations` awaited once at its end (EOF on stdin) before the
    SDK sees the end. Everything else is the wrapped stream's (`last_context` included)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._ended = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def _eof(self) -> None:
        if not self._ended:
            self._ended = True
            await end_operations("stdin closed (the client is gone)")

    def __aiter__(self) -> _UntilEof:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._stream.__anext__()
        except StopAsyncIteration:
            await self._eof()
            raise

    async def receive(self) -> Any:
        try:
            return await self._stream.receive()
        except anyio.EndOfStream:
            await self._eof()
            raise

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> _UntilEof:
        await self._stream.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._stream.__aexit__(*exc)


async def _serve(mcp: MCPServer) -> None:
    low = mcp._lowlevel_server  # as MCPServer.run_stdio_async does
    try:
        async with stdio_server() as (read_stream, write_stream):
            await low.run(_UntilEof(read_stream), write_stream, low.create_initialization_options())
    except* (BrokenPipeError, ConnectionResetError):
        await end_operations("stdout closed (the client is gone)")


def serve_stdio(mcp: MCPServer, pid_dir: Path | None) -> None:
    """Serve `mcp` over stdin/stdout until the client closes stdin (module docstring). `pid_dir`: the
    session's folder of run records (Session.where.pid_dir; None when no session opened)."""
    anyio.run(_serve, mcp)
    left = running_count()
    if left:
        killed = end_own_runs(pid_dir) if pid_dir is not None else []
        log.warning("%d operation(s) still ran %g s after the client went away: killed their runs (pids %s) and "
                    "exiting now", left, END_GRACE_S, killed)
        logging.shutdown()
        os._exit(0)
