"""Tools: find_idle_device (the device availability gate: a GPU, or the CPU where there is none), and
find_idle_gpu, its deprecated name, kept as an alias for one release (issue 36 item 3)."""

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool

from kopt_mcp.app.tools._adapter import call, referee, tool
from kopt_mcp.results import GpuResult


def register(tools: list[Tool]) -> None:
    @tool(tools, "Find an idle device (probe)", read_only_hint=False, destructive_hint=False, idempotent_hint=True,
          open_world_hint=False)
    async def find_idle_device(ctx: Context) -> GpuResult:
        """Optional probe: find an idle device. A GPU: no compute process, low utilization and memory, no
        job of another server (waits up to gpu_wait_s, then the session stops). The CPU: other processes'
        load under idle_cpu_pct (waits up to cpu_wait_s, then measures anyway). The lease is NOT kept:
        each measuring tool leases its own. Returns the device or why each was busy.
        """
        return await call(ctx, referee(ctx).find_idle_gpu)

    @tool(tools, "Find an idle device (deprecated name)", read_only_hint=False, destructive_hint=False,
          idempotent_hint=True, open_world_hint=False)
    async def find_idle_gpu(ctx: Context) -> GpuResult:
        """Deprecated: the old name of find_idle_device (any device: a GPU, or the CPU where there is none),
        kept for one release; call find_idle_device. Same probe, same result: the device the next
        measuring call would get, or why each was busy; the lease is not kept.
        """
        return await call(ctx, referee(ctx).find_idle_gpu)
