"""Read-only tools: status and get_attempt."""

from mcp.server.mcpserver import Context, MCPServer

from kopt_mcp.results import AttemptResult, StatusResult
from kopt_mcp.tools._adapter import READ_ONLY, call, referee, tool


def register(mcp: MCPServer) -> None:
    @tool(mcp, "Session status", **READ_ONLY)
    async def status(ctx: Context) -> StatusResult:
        """Where the session stands. Call first and whenever unsure what to do next.

        Returns: phase (needs_baseline | ready | repairing | improved | stopped), the workspace path
        (edit kernels there) and branch, BEST_COMMIT with its per-class metric and GPU time (us), the
        fixed benchmark command and metric, attempts, kept improvements, consecutive regressions (and
        the limit), repairs used, the last verdict, the stop reason, the frozen config hash (and whether
        the file changed on disk since), the leased device, and next_actions.
        """
        return referee(ctx).status()

    @tool(mcp, "Read an archived attempt", **READ_ONLY)
    async def get_attempt(ctx: Context, attempt: int) -> AttemptResult:
        """Read an archived attempt: its patch (the full diff against the BEST_COMMIT of its time, up
        to 60000 characters) and its ledger record (verdict, reason, per-class deltas). Use it to
        re-apply a divergent or abandoned idea. Args: attempt: the attempt number from a verdict.
        """
        return await call(ctx, referee(ctx).get_attempt, attempt, progress=False)
