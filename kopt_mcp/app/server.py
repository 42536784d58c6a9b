"""Builds the MCPServer: registers tools, resources and prompts; nothing else.

A server whose session could not open (bad repository or config, a second server on the same
repository) is still built (`build_server(StartupError(...))`): it answers `initialize`, lists the
same tools; `status` answers with phase `unconfigured`, the problem and its fix (app/tools/info.py), and every
other tool, resource and prompt returns that error, so the client shows it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from kopt_mcp import __version__
from kopt_mcp.app import prompts
from kopt_mcp.app.logs import serve_mcp_logging
from kopt_mcp.app.program import render_program
from kopt_mcp.app.slot_pool import SlotPool
from kopt_mcp.app.tasks import TasksExtension, TaskStore
from kopt_mcp.app.tools import knowledge as knowledge_tools
from kopt_mcp.app.tools import notify, report, select_tools
from kopt_mcp.app.tools.charts import register_resources
from kopt_mcp.errors import StartupError
from kopt_mcp.referee import Referee

INSTRUCTIONS = (
    "kopt-mcp referees a kernel optimization loop on a GPU, or on the CPU where there is none. Read the "
    "resource kopt://program.md first. "
    "Call status, then run_benchmark (baseline), then loop: kernel_trace_analysis -> edit the kernel "
    "in the workspace -> save_and_test -> commit_improvement when improved. The server decides verdicts."
)
SCHEME = "kopt://"


class KoptServer(MCPServer):
    """MCPServer that resolves a resource named without its scheme (`program.md` -> kopt://program.md)
    and otherwise says which URIs exist."""

    async def read_resource(self, uri: Any, context: Any = None) -> Any:
        try:
            return await super().read_resource(uri, context)
        except ResourceNotFoundError as e:
            text = str(uri)
            known = sorted(str(r.uri) for r in await self.list_resources())
            if not text.startswith(SCHEME) and SCHEME + text.lstrip("/") in known:
                return await super().read_resource(SCHEME + text.lstrip("/"), context)
            near = [k for k in known if k.rsplit("/", 1)[-1] == text.rsplit("/", 1)[-1]] or [
                k for k in known if k.count("/") <= 2][:6]
            raise ResourceNotFoundError(f"unknown resource {text!r}; resource URIs start with {SCHEME}, e.g. "
                                        f"{', '.join(near)} (resources/list shows all)") from e


@dataclass(frozen=True)
class ServerState:
    """What every request reads from the server's lifespan (`ctx.request_context.lifespan_context`):
    the session's Referee (None when it could not open), the StartupError that kept it closed, the
    candidate-slot pool of streamable HTTP (None: one slot), and the MCP tasks of this server."""

    referee: Referee | None
    startup_error: StartupError | None
    slots: SlotPool | None
    tasks: TaskStore


def build_server(ref: Referee | StartupError, tools: list[str] | None = None, read_only: bool = False,
                 slot_per_session: bool = False) -> MCPServer:
    """An MCPServer bound to one session's Referee (closed when the server shuts down), or, given the
    StartupError that kept the session from opening, a server whose every tool returns that error.
    `tools` / `read_only` expose a subset (see tools.select_tools; ValueError for unknown names).
    `slot_per_session` (streamable HTTP): each concurrent MCP session gets its own candidate slot
    (kopt_mcp.app.slot_pool); resources and prompts show the main slot."""
    error = ref if isinstance(ref, StartupError) else None
    session = None if error else ref
    pool = None
    if session is not None and slot_per_session:
        where = session.where
        pool = SlotPool(session, lambda name: Referee(where.repo_path, where.config_path, where.tag,
                                                      services=session.services, slot=name))

    tasks = TaskStore()  # long calls as MCP tasks where the client declares the extension (app/tasks.py)

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[ServerState]:
        try:
            async with tasks.running():
                yield ServerState(referee=session, startup_error=error, slots=pool, tasks=tasks)
        finally:
            if pool is not None:
                pool.close()
            if session is not None:
                session.close()

    mcp = KoptServer("kopt-mcp", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan,
                     tools=select_tools(tools, read_only), extensions=[TasksExtension()])
    serve_mcp_logging(mcp)  # logging/setLevel; tool calls log their phases (tools/heartbeat.py)
    knowledge_tools.register_resources(mcp)
    notify.register(mcp)

    def live() -> Referee:
        if session is None:
            raise ResourceError(str(error))
        return session

    if session is not None:
        register_resources(mcp, session)
        report.register(mcp, session)

    @mcp.resource("kopt://program.md", name="program.md", mime_type="text/markdown",
                  description="The optimization loop with this session's command, paths and thresholds.")
    def program_md() -> str:
        return render_program(live())

    @mcp.resource("kopt://performance.md", name="performance.md", mime_type="text/markdown",
                  description="Baseline, kept improvements and Stop Summary of this session.")
    def performance_md() -> str:
        p = live().where.workspace_path / "performance.md"
        return p.read_text(encoding="utf-8") if p.exists() else "(no baseline yet: call run_benchmark)\n"

    @mcp.resource("kopt://ledger.jsonl", name="ledger", mime_type="application/jsonl",
                  description="Every event and attempt of this session, one JSON object per line.")
    def ledger() -> str:
        p = live().books.store.ledger_path
        return p.read_text(encoding="utf-8") if p.exists() else ""

    @mcp.prompt(name="optimization_loop", description="Run the refereed kernel optimization loop (program.md, live).")
    def optimization_loop() -> str:
        return prompts.optimization_loop(live())

    @mcp.prompt(name="research_directions",
                description="Ranked, advisory optimization hypotheses from the latest trace, the per-class "
                "table and past attempts (advice the agent weighs, never orders).")
    def research_directions() -> str:
        return prompts.research_directions(live())

    return mcp
