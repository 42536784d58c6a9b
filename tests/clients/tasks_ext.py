"""Clients that speak the MCP tasks extension (io.modelcontextprotocol/tasks, protocol 2026-07-28) for
the tests: the Python SDK's client with a ClientExtension that claims `resultType: "task"` and polls
`tasks/get` (the SDK has the claim machinery but no tasks client of its own), and a raw JSON-RPC
client over streamable HTTP (httpx2) that stamps the 2026-07-28 envelope itself."""

from __future__ import annotations

import json
from typing import Any, Literal

import anyio
import httpx2
import mcp_types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import ConfigDict

EXT = "io.modelcontextprotocol/tasks"
PROTOCOL = "2026-07-28"


class CreateTask(mcp_types.Result):
    """CreateTaskResult: the task handle a server answers tools/call with."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"]
    task_id: str
    status: str
    status_message: str | None = None


class TaskRef(mcp_types.RequestParams):
    task_id: str


class TaskGet(mcp_types.Request[TaskRef, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"  # the Mcp-Name header the extension requires on streamable HTTP


class TaskCancel(mcp_types.Request[TaskRef, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class TaskState(mcp_types.Result):
    """tasks/get's DetailedTask."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    result: dict | None = None
    error: dict | None = None


class TasksClient(ClientExtension):
    """Claims task results and resolves them by polling tasks/get every `poll_s`; `seen` records each
    poll's (status, statusMessage, _meta)."""

    identifier = EXT

    def __init__(self, poll_s: float = 0.2) -> None:
        self.poll_s = poll_s
        self.seen: list[tuple[str, str | None, dict | None]] = []
        self.created: list[CreateTask] = []

    def claims(self) -> list[ResultClaim]:
        return [ResultClaim(result_type="task", model=CreateTask, resolve=self.resolve)]

    async def resolve(self, created: CreateTask, ctx: ClaimContext) -> mcp_types.CallToolResult:
        self.created.append(created)
        while True:
            got = await ctx.session.send_request(TaskGet(params=TaskRef(task_id=created.task_id)), TaskState)
            self.seen.append((got.status, got.status_message, got.meta))
            if got.status == "completed":
                return mcp_types.CallToolResult.model_validate(got.result)
            if got.status in ("failed", "cancelled"):
                raise RuntimeError(f"task {got.status}: {got.status_message} {got.error}")
            await anyio.sleep(self.poll_s)


class RawClient:
    """JSON-RPC over streamable HTTP, 2026-07-28 envelope stamped by hand; `tasks` declares the extension."""

    def __init__(self, http: httpx2.AsyncClient, url: str, tasks: bool = True) -> None:
        self.http, self.url, self.tasks, self.next_id = http, url, tasks, 0

    async def request(self, method: str, params: dict[str, Any] | None = None, name: str | None = None) -> dict:
        """The JSON-RPC answer (`result` or `error`) of one request."""
        self.next_id += 1
        params = dict(params or {})
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientInfo": {"name": "raw-tasks-test", "version": "0"},
            "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXT: {}} if self.tasks else {}},
        }
        headers = {"accept": "application/json, text/event-stream", "content-type": "application/json",
                   "mcp-protocol-version": PROTOCOL, "mcp-method": method}
        if name is not None:
            headers["mcp-name"] = name
        r = await self.http.post(self.url, headers=headers, json={"jsonrpc": "2.0", "id": self.next_id,
                                                                  "method": method, "params": params})
        if r.headers.get("content-type", "").startswith("application/json"):
            return r.json()
        data = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
        return json.loads(data[-1])

    async def call_tool(self, name: str, arguments: dict | None = None) -> dict:
        return await self.request("tools/call", {"name": name, "arguments": arguments or {}}, name=name)

    async def task(self, method: str, task_id: str) -> dict:
        return await self.request(method, {"taskId": task_id}, name=task_id)
