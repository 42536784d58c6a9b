"""Tool: find_idle_gpu (the GPU availability gate)."""

from mcp.server.mcpserver import Context, MCPServer

from kopt_mcp.results import GpuResult
from kopt_mcp.tools._adapter import call, referee, tool


def register(mcp: MCPServer) -> None:
    @tool(
        mcp,
        "Find and lease an idle GPU",
        read_only_hint=False,
        destructive_hint=False,
        idempotent_hint=True,
        open_world_hint=False,
    )
    async def find_idle_gpu(ctx: Context) -> GpuResult:
        """Lease an idle GPU for this session (the availability gate). Optional: every measuring tool
        calls the gate itself; call this first to see which device you will get.

        A GPU is idle when it has no compute process, utilization and memory use under the session's
        thresholds, and no other kopt-mcp server holds its lease. With none idle the server waits
        (gpu_poll_s between checks, progress reported) up to gpu_wait_s; then the session stops with
        reason `no idle GPU`. Without a GPU (probe `none`) the CPU is the device and this passes at once.
        Returns: leased (bool), device (vendor, index, name, env that binds it), per-GPU checks with the
        reasons each was busy, waited_s, reason, stopped.
        """
        r = referee(ctx)
        return await call(ctx, r.find_idle_gpu)
