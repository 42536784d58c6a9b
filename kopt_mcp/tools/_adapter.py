"""Shared adapter code: run a referee operation in a worker thread, bridge its progress callback
to MCP progress notifications, and turn actionable errors into tool errors."""

from __future__ import annotations

import functools
import inspect
import threading
from typing import Any, Callable, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from kopt_mcp.config import ConfigError
from kopt_mcp.gpus.base import ProbeError
from kopt_mcp.profilers.base import ProfilerError
from kopt_mcp.referee import Referee, RefereeError
from kopt_mcp.referee.core import Cancelled
from kopt_mcp.session import SessionError
from kopt_mcp.tools import heartbeat
from kopt_mcp.vcs import VcsError

T = TypeVar("T")
ACTIONABLE = (RefereeError, SessionError, VcsError, ConfigError, ProbeError, ProfilerError, ValueError)


def referee(ctx: Context) -> Referee:
    """The session's Referee from the server's lifespan state."""
    return ctx.request_context.lifespan_context["referee"]


async def call(ctx: Context, fn: Callable[..., T], *args: Any, progress: bool = True, **kwargs: Any) -> T:
    """Run `fn(*args, **kwargs[, progress=cb])` in a worker thread; ACTIONABLE errors -> ToolError."""
    beat = heartbeat.for_call(ctx, fn) if progress else None  # progress at least every few s (heartbeat.py)
    if beat is not None:
        kwargs["progress"] = beat.update
    cancel = threading.Event()
    try:
        # abandon_on_cancel: a cancelled call returns at once; the event makes the worker kill the
        # running process tree, release the lease and restore the session (see referee.operation)
        return await heartbeat.run_beside(beat, functools.partial(
            anyio.to_thread.run_sync, functools.partial(fn, *args, cancel=cancel, **kwargs), abandon_on_cancel=True))
    except anyio.get_cancelled_exc_class():
        cancel.set()
        raise
    except Cancelled as e:
        raise ToolError(str(e)) from e
    except ACTIONABLE as e:
        raise ToolError(str(e)) from e


READ_ONLY = dict(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
MEASURING = dict(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def tool(mcp: MCPServer, title: str, **hints: bool):
    """Register a tool with annotations; its description is the function's docstring, dedented."""

    def deco(fn):
        mcp.add_tool(
            fn,
            title=title,
            description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=ToolAnnotations(title=title, **hints),
        )
        return fn

    return deco
