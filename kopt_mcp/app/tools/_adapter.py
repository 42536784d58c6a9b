"""Shared adapter code: run a referee operation in a worker thread, bridge its progress callback
to MCP progress notifications, and turn errors into tool errors (through `tools.errors`).

Tools are built as SDK `Tool` objects (`tool(...)` appends one to a list) whose argument model
refuses unknown arguments (`additionalProperties: false` in the input schema)."""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import ToolAnnotations
from pydantic import ConfigDict

from kopt_mcp.app.tools import heartbeat
from kopt_mcp.app.tools.bounds import bounded
from kopt_mcp.app.tools.errors import to_tool_error
from kopt_mcp.errors import StartupError
from kopt_mcp.referee import Referee

T = TypeVar("T")


def referee(ctx: Context) -> Referee:
    """The session's Referee from the server's lifespan state; raises the start-up error (a
    StartupError) when the server could not open its session."""
    state = ctx.request_context.lifespan_context  # kopt_mcp.app.server.ServerState
    ref = state.referee
    if ref is None:
        raise state.startup_error or StartupError("the session is not open: restart kopt-mcp serve")
    pool = state.slots  # streamable HTTP: one candidate slot per MCP session (kopt_mcp.app.slot_pool)
    if pool is None:
        return ref
    request = getattr(ctx.request_context, "request", None)
    headers = request.headers if request is not None else {}
    if headers.get("kopt-slot"):
        return pool.named(headers["kopt-slot"])
    return pool.for_session(headers["mcp-session-id"]) if headers.get("mcp-session-id") else ref


def _repo_of(ctx: Context | None) -> Path | None:
    try:
        return referee(ctx).where.repo_path if ctx is not None else None
    except Exception:
        return None


async def call(ctx: Context, fn: Callable[..., T], *args: Any, progress: bool = True, **kwargs: Any) -> T:
    """Run `fn(*args, **kwargs[, progress=cb])` in a worker thread; any error -> ToolError (tools.errors).
    While it runs, progress goes out at least every few seconds and ends at its total (tools.heartbeat).
    The result's per-class lists are cut to stay small (tools.bounds)."""
    beat = heartbeat.for_call(ctx, fn) if progress else None
    if beat is not None:
        kwargs["progress"] = beat.update
    cancel = threading.Event()
    try:
        # abandon_on_cancel: a cancelled call returns at once; the event makes the worker kill the
        # running process tree, release the lease and restore the session (see referee.operation)
        return bounded(await heartbeat.run_beside(beat, functools.partial(
            anyio.to_thread.run_sync, functools.partial(fn, *args, cancel=cancel, **kwargs), abandon_on_cancel=True)))
    except anyio.get_cancelled_exc_class():
        cancel.set()
        raise
    except Exception as e:
        raise to_tool_error(e, _repo_of(ctx), getattr(fn, "__name__", "")) from e


READ_ONLY = dict(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
MEASURING = dict(read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def _guarded(fn):
    """`fn` (an async tool body) with every error but a protocol error mapped by tools.errors."""

    @functools.wraps(fn)
    async def run(*args, **kwargs):
        try:
            return await fn(*args, **kwargs)
        except MCPError:
            raise
        except Exception as e:
            ctx = next((v for v in (*args, *kwargs.values()) if isinstance(v, Context)), None)
            raise to_tool_error(e, _repo_of(ctx), fn.__name__) from e

    return run


def strict(t: Tool) -> Tool:
    """`t` with an argument model that refuses unknown arguments; its input schema says so."""
    base = t.fn_metadata.arg_model
    model = type(base)(base.__name__, (base,), {"__module__": base.__module__,
                                                "model_config": ConfigDict(extra="forbid")})
    t.fn_metadata.arg_model = model
    t.parameters = _drop_titles(model.model_json_schema(by_alias=True))
    return t


def _drop_titles(schema):
    """The schema without pydantic's generated `title`s (they repeat the names; the model reads every
    character of tools/list). A property that is itself named `title` is kept."""
    if isinstance(schema, dict):
        return {k: ({name: _drop_titles(sub) for name, sub in v.items()} if k == "properties" and isinstance(v, dict)
                    else _drop_titles(v))
                for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_drop_titles(v) for v in schema]
    return schema


def tool(registry: list[Tool], title: str, **hints: bool):
    """Decorator: append `fn` to `registry` as a Tool with annotations; its description is the
    function's docstring, dedented; errors mapped (tools.errors); unknown arguments refused."""

    def deco(fn):
        registry.append(strict(Tool.from_function(
            _guarded(fn), title=title, description=inspect.cleandoc(fn.__doc__ or ""),
            annotations=ToolAnnotations(title=title, **hints))))
        return fn

    return deco
