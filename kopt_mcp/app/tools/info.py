"""Read-only tools: status and get_attempt."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from kopt_mcp.app.tools._adapter import READ_ONLY, call, referee, tool
from kopt_mcp.app.tools.bounds import bounded
from kopt_mcp.errors import StartupError
from kopt_mcp.results import AttemptResult, StatusResult


def unconfigured(error: StartupError) -> StatusResult:
    """status of a server whose session could not open: phase `unconfigured`, the `problem` (the
    start-up error every other tool returns) and the `fix`; every session field empty."""
    return StatusResult(
        phase="unconfigured", tag="", branch="", workspace="", best_commit="", best_metrics={}, best_gpu_us=None,
        metric="", benchmark_command="", attempts=0, kept=0, consecutive_regressions=0, max_consecutive_regressions=0,
        repairs_used=None, last_verdict=None, stop_reason=None, config_sha256="", config_changed=False, device=None,
        next_actions=[], problem=str(error), fix=getattr(error, "fix", "") or "fix what `problem` names, then restart "
        "the MCP server: the session opens at start")


def register(tools: list[Tool]) -> None:
    @tool(tools, "Session status", **READ_ONLY)
    async def status(ctx: Context) -> StatusResult:
        """Where the session stands; call first and whenever unsure what to do next. Returns the phase,
        the workspace to edit, BEST_COMMIT with its per-class metric and GPU time (us; null on a CPU), counters, the last
        verdict, the stop reason and next_actions. A session that could not open: phase unconfigured, problem, fix.
        """
        state = ctx.request_context.lifespan_context  # kopt_mcp.app.server.ServerState
        if state.referee is None:
            return unconfigured(state.startup_error or StartupError("the session is not open"))
        return bounded(referee(ctx).status())

    @tool(tools, "Read an archived attempt", **READ_ONLY)
    async def get_attempt(
        ctx: Context,
        attempt: Annotated[int, Field(ge=1, le=1_000_000, description="attempt number from a verdict")],
    ) -> AttemptResult:
        """An archived attempt: its patch (diff against the BEST_COMMIT of its time, bounded) and its
        ledger record (verdict, reason, per-class deltas). Use it to re-apply an earlier idea."""
        return await call(ctx, referee(ctx).get_attempt, attempt, progress=False)
