"""Builds the MCPServer: registers tools, resources and prompts; nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from mcp.server.mcpserver import MCPServer

from kopt_mcp import __version__, prompts
from kopt_mcp.logs import serve_mcp_logging
from kopt_mcp.program import render_program
from kopt_mcp.referee import Referee
from kopt_mcp.tools import register_all
from kopt_mcp.tools import knowledge as knowledge_tools
from kopt_mcp.tools import notify, report
from kopt_mcp.tools.charts import register_resources

INSTRUCTIONS = (
    "kopt-mcp referees a GPU-kernel optimization loop. Read the resource kopt://program.md first. "
    "Call status, then run_benchmark (baseline), then loop: kernel_trace_analysis -> edit the kernel "
    "in the workspace -> save_and_test -> commit_improvement when improved. The server decides verdicts."
)


def build_server(ref: Referee) -> MCPServer:
    """An MCPServer bound to one session's Referee (closed when the server shuts down)."""

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[dict]:
        try:
            yield {"referee": ref}
        finally:
            ref.close()

    mcp = MCPServer("kopt-mcp", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan)
    register_all(mcp)
    serve_mcp_logging(mcp)  # logging/setLevel; tool calls log their phases (tools/heartbeat.py)
    register_resources(mcp, ref)
    knowledge_tools.register_resources(mcp)
    report.register(mcp, ref)
    notify.register(mcp)

    @mcp.resource("kopt://program.md", name="program.md", mime_type="text/markdown",
                  description="The optimization loop with this session's command, paths and thresholds.")
    def program_md() -> str:
        return render_program(ref)

    @mcp.resource("kopt://performance.md", name="performance.md", mime_type="text/markdown",
                  description="Baseline, kept improvements and Stop Summary of this session.")
    def performance_md() -> str:
        p = ref.workspace_path / "performance.md"
        return p.read_text(encoding="utf-8") if p.exists() else "(no baseline yet: call run_benchmark)\n"

    @mcp.resource("kopt://ledger.jsonl", name="ledger", mime_type="application/jsonl",
                  description="Every event and attempt of this session, one JSON object per line.")
    def ledger() -> str:
        p = ref.store.ledger_path
        return p.read_text(encoding="utf-8") if p.exists() else ""

    @mcp.prompt(name="optimization_loop", description="Run the refereed kernel optimization loop (program.md, live).")
    def optimization_loop() -> str:
        return prompts.optimization_loop(ref)

    @mcp.prompt(name="research_directions",
                description="Ranked, advisory optimization hypotheses from the latest trace, the per-class "
                "table and past attempts (advice the agent weighs, never orders).")
    def research_directions() -> str:
        return prompts.research_directions(ref)

    return mcp
