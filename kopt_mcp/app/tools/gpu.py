"""Tool: find_idle_gpu (the GPU availability gate)."""

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool

from kopt_mcp.app.tools._adapter import call, referee, tool
from kopt_mcp.results import GpuResult


def register(tools: list[Tool]) -> None:
    @tool(tools, "Find an idle GPU (probe)", read_only_hint=False, destructive_hint=False, idempotent_hint=True,
          open_world_hint=False)
    async def find_idle_gpu(ctx: Context) -> GpuResult:
        """Optional probe: find an idle GPU (no compute process, low utilization and memory, no job of another
        server on it). The lease is NOT kept: each measuring tool leases a GPU for its own call (preferring
        this one). Waits while none is idle; after gpu_wait_s the session stops. Returns the device or why
        each GPU was busy.
        """
        return await call(ctx, referee(ctx).find_idle_gpu)
