"""Read-only tools: status and get_attempt."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from kopt_mcp.app.tools._adapter import READ_ONLY, call, referee, tool
from kopt_mcp.app.tools.bounds import bounded
from kopt_mcp.results import AttemptResult, StatusResult


def register(tools: list[Tool]) -> None:
    @tool(tools, "Session status", **READ_ONLY)
    async def status(ctx: Context) -> StatusResult:
        """Where the session stands; call first and whenever unsure what to do next. Returns the phase,
        the workspace to edit, BEST_COMMIT with its per-class metric and GPU time (us; null on a CPU), counters, the last
        verdict, the stop reason and next_actions. A server that could not start returns its error here.
        """
        return bounded(referee(ctx).status())

    @tool(tools, "Read an archived attempt", **READ_ONLY)
    async def get_attempt(
        ctx: Context,
        attempt: Annotated[int, Field(ge=1, le=1_000_000, description="attempt number from a verdict")],
    ) -> AttemptResult:
        """An archived attempt: its patch (diff against the BEST_COMMIT of its time, bounded) and its
        ledger record (verdict, reason, per-class deltas). Use it to re-apply an earlier idea."""
        return await call(ctx, referee(ctx).get_attempt, attempt, progress=False)
