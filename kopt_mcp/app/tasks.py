"""Long tool calls as MCP tasks: the `io.modelcontextprotocol/tasks` extension of protocol 2026-07-28.

The extension (https://modelcontextprotocol.github.io/ext-tasks/specification/2026-07-28/tasks.html)
lets a server answer `tools/call` with a task handle (`resultType: "task"`, a task id, status
`working`) instead of the result; the client polls `tasks/get` until the status is terminal
(`completed` with the CallToolResult in `result`, `failed` with a JSON-RPC `error`, `cancelled`),
and may send `tasks/cancel` (an acknowledgement; cancellation is cooperative) and `tasks/update`
(answers to a task's input requests; kopt's tools never ask for input). A server may create a task
only for a request whose per-request client capabilities declare the extension, and must answer
`tasks/*` from a client that does not with -32021; an unknown task id is -32602.

Here: where the client declares the extension on a 2026-07-28 request, the long tools (TASK_TOOLS:
a benchmark run, a verdict, a commit's re-measure, a profile, the warm-up) run as tasks in a task
group the server's lifespan holds, so they outlive the `tools/call` request. The task's status
message is the tool's heartbeat (app/tools/heartbeat.py: the referee's current step and the time on
it), its `_meta["kopt-mcp/progress"]` the heartbeat's progress and total. `tasks/cancel` cancels
the task's scope: the tool adapter sets the referee's cancel event, which kills the run's whole
process tree, releases the lease and restores the session (kopt_mcp.referee.operation). Every other
call, and every call of a client without the extension, runs as before (progress notifications).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import anyio
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

EXTENSION_ID = "io.modelcontextprotocol/tasks"
#: the tools that may run as tasks (a new long-running tool adds its name here)
TASK_TOOLS = frozenset({"run_benchmark", "save_and_test", "commit_improvement", "kernel_trace_analysis",
                        "warm_up_harness"})
TTL_MS = 24 * 3600 * 1000  # a task and its result are kept a day from creation, then forgotten
POLL_MS = 2000
TERMINAL = frozenset({"completed", "failed", "cancelled"})
PROGRESS_META = "kopt-mcp/progress"

_current: ContextVar[TaskRecord | None] = ContextVar("kopt_mcp_task", default=None)


def current_task() -> TaskRecord | None:
    """The task whose tool call runs in this context, or None for a plain call."""
    return _current.get()


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class TaskRecord:
    """One task: the tool it runs, its status and status message, and its outcome once terminal."""

    task_id: str
    tool: str
    created: float
    updated: float
    status: str = "working"
    message: str = "started"
    progress: tuple[float, float] | None = None
    result: dict | None = None
    error: dict | None = None
    scope: anyio.CancelScope | None = field(default=None, repr=False)

    async def report(self, progress: float, total: float, message: str) -> None:
        """The heartbeat's send (app/tools/heartbeat.Send): the task's progress and status message."""
        if self.status == "working":
            self.progress, self.message, self.updated = (progress, total), message, time.time()

    def finish(self, status: str, message: str, result: dict | None = None, error: dict | None = None) -> None:
        """Move to terminal `status` (a terminal task never changes again)."""
        if self.status in TERMINAL:
            return
        self.status, self.message, self.result, self.error, self.updated = status, message, result, error, time.time()

    def wire(self) -> dict[str, Any]:
        """The Task shape (tasks/get's DetailedTask): status-specific `result` / `error` inlined."""
        out: dict[str, Any] = {"taskId": self.task_id, "status": self.status, "statusMessage": self.message,
                               "createdAt": _iso(self.created), "lastUpdatedAt": _iso(self.updated),
                               "ttlMs": TTL_MS, "pollIntervalMs": POLL_MS}
        if self.progress is not None:
            out["_meta"] = {PROGRESS_META: {"progress": self.progress[0], "total": self.progress[1]}}
        if self.status == "completed":
            out["result"] = self.result or {}
        if self.status == "failed":
            out["error"] = self.error or {"code": INTERNAL_ERROR, "message": self.message}
        return out


class TaskStore:
    """The server's tasks, run in a task group that lives as long as `running()` (the server's lifespan)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._tasks: dict[str, TaskRecord] = {}
        self._tg: anyio.abc.TaskGroup | None = None

    @asynccontextmanager
    async def running(self) -> AsyncIterator[TaskStore]:
        """Hold the task group; on exit every task still working is cancelled (its process tree killed)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            try:
                yield self
            finally:
                self._tg = None
                tg.cancel_scope.cancel()

    @property
    def ready(self) -> bool:
        """True while the task group runs (tasks can be started)."""
        return self._tg is not None

    def start(self, tool: str, work: Callable[[], Awaitable[Any]]) -> TaskRecord:
        """Create a task for `tool` (retrievable at once) and run `work()` (-> the CallToolResult) in it."""
        if self._tg is None:
            raise RuntimeError("the task store is not running (no server lifespan)")
        self._purge()
        now = self.clock()
        rec = TaskRecord(task_id=str(uuid.uuid4()), tool=tool, created=now, updated=now,
                         message=f"{tool}: started")
        self._tasks[rec.task_id] = rec
        self._tg.start_soon(self._run, rec, work)
        return rec

    async def _run(self, rec: TaskRecord, work: Callable[[], Awaitable[Any]]) -> None:
        token = _current.set(rec)
        try:
            with anyio.CancelScope() as scope:
                rec.scope = scope
                try:
                    out = await work()
                    dumped = out.model_dump(by_alias=True, mode="json", exclude_none=True) \
                        if isinstance(out, BaseModel) else dict(out or {})
                    rec.finish("completed", f"{rec.tool}: done after {self.clock() - rec.created:.0f} s",
                               result=dumped)
                except MCPError as e:
                    rec.finish("failed", f"{rec.tool} failed: {e.error.message}",
                               error=e.error.model_dump(by_alias=True, mode="json", exclude_none=True))
                except Exception as e:  # noqa: BLE001 - a task's failure is its status, not the server's
                    rec.finish("failed", f"{rec.tool} failed: {e}", error={"code": INTERNAL_ERROR,
                                                                          "message": str(e)[:500]})
            if scope.cancelled_caught:
                rec.finish("cancelled", f"{rec.tool} cancelled: its runs' process trees were killed and the "
                           "session restored")
        finally:
            _current.reset(token)

    def get(self, task_id: str) -> TaskRecord:
        """The task `task_id`. Raises MCPError -32602 (invalid params) when unknown or expired."""
        self._purge()
        rec = self._tasks.get(task_id)
        if rec is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Failed to retrieve task: task {task_id!r} not found "
                           "(unknown, or expired a day after it was created)")
        return rec

    def cancel(self, task_id: str) -> TaskRecord:
        """Ask task `task_id` to stop (no-op when it already ended). Raises MCPError -32602 when unknown."""
        rec = self.get(task_id)
        if rec.status not in TERMINAL and rec.scope is not None:
            rec.message = f"{rec.tool}: cancelling (killing its process tree)"
            rec.scope.cancel()
        return rec

    def _purge(self) -> None:
        cutoff = self.clock() - TTL_MS / 1000
        for tid in [t for t, r in self._tasks.items() if r.status in TERMINAL and r.created < cutoff]:
            del self._tasks[tid]


class TaskIdParams(RequestParams):
    """tasks/get and tasks/cancel params: `taskId`."""

    task_id: str


class UpdateTaskParams(TaskIdParams):
    """tasks/update params: `taskId` and `inputResponses` (kopt's tasks never ask for input)."""

    input_responses: dict[str, Any] = {}


def declares_tasks(ctx: Any) -> bool:
    """True where this request is 2026-07-28 (or later) and its client capabilities name the extension."""
    caps = getattr(ctx.session, "client_capabilities", None)
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and EXTENSION_ID in ((caps and caps.extensions) or {})


def _store(ctx: Any) -> TaskStore | None:
    return getattr(ctx.lifespan_context, "tasks", None)  # kopt_mcp.app.server.ServerState


def _require(ctx: Any) -> TaskStore:
    require_client_extension(ctx, EXTENSION_ID)  # -32021 for a client that did not declare it
    store = _store(ctx)
    if store is None:
        raise MCPError(code=INTERNAL_ERROR, message="this server keeps no tasks")
    return store


async def _get(ctx: Any, params: TaskIdParams) -> dict:
    return {"resultType": "complete", **_require(ctx).get(params.task_id).wire()}


async def _update(ctx: Any, params: UpdateTaskParams) -> dict:
    _require(ctx).get(params.task_id)  # -32602 when unknown; no input is ever outstanding
    return {"resultType": "complete"}


async def _cancel(ctx: Any, params: TaskIdParams) -> dict:
    _require(ctx).cancel(params.task_id)
    return {"resultType": "complete"}


class TasksExtension(Extension):
    """The tasks extension on an MCPServer whose lifespan state holds a running TaskStore under "tasks"."""

    identifier = EXTENSION_ID

    def methods(self) -> list[MethodBinding]:
        return [MethodBinding("tasks/get", TaskIdParams, _get),
                MethodBinding("tasks/update", UpdateTaskParams, _update),
                MethodBinding("tasks/cancel", TaskIdParams, _cancel)]

    async def intercept_tool_call(self, params, ctx, call_next):
        """A TASK_TOOLS call from a client that declared the extension: start it as a task and answer
        with the task handle (CreateTaskResult); any other call runs as usual."""
        store = _store(ctx)
        if params.name not in TASK_TOOLS or store is None or not store.ready or not declares_tasks(ctx):
            return await call_next(ctx)
        rec = store.start(params.name, lambda: call_next(ctx))
        return {"resultType": "task", **rec.wire()}
