"""Tool: find_idle_gpu (the GPU availability gate)."""

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool

from kopt_mcp.results import GpuResult
from kopt_mcp.tools._adapter import call, referee, tool


def register(tools: list[Tool]) -> None:
    @tool(tools, "Find and lease an idle GPU", read_only_hint=False, destructive_hint=False, idempotent_hint=True,
          open_world_hint=False)
    async def find_idle_gpu(ctx: Context) -> GpuResult:
        """Optional: lease an idle GPU (no compute process, low utilization and memory, no other server's
        lease) to see which device the measuring tools will use; they call the gate themselves. Waits
        while none is idle; after gpu_wait_s the session stops. Returns the device or why each GPU was busy.
        """
        return await call(ctx, referee(ctx).find_idle_gpu)
