"""Tools that measure without a verdict: run_benchmark, kernel_trace_analysis, warm_up_harness,
measure_session_gain."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from kopt_mcp.app.tools._adapter import MEASURING, READ_ONLY, call, referee, tool
from kopt_mcp.results import BenchmarkResult, SessionGainResult, TraceResult, WarmupResult


def register(tools: list[Tool]) -> None:
    @tool(tools, "Run the fixed benchmark", **MEASURING)
    async def run_benchmark(ctx: Context) -> BenchmarkResult:
        """Run the fixed benchmark once on a leased device; no verdict. The first call records the
        baseline of BEST_COMMIT (several runs, profiled too; init's runs of the same tree adopted:
        `reason` says which). Later calls are a quick check of the workspace with the change vs BEST
        per class (+% = better; one run: use save_and_test for a verdict). Returns per-class metric and
        correctness, the gate, exit code, log tail, next_actions; at the baseline `gpu_target`: the
        kernels whose GPU time decides.
        """
        return await call(ctx, referee(ctx).run_benchmark)

    @tool(tools, "Profile the kernels (trace)", **MEASURING)
    async def kernel_trace_analysis(
        ctx: Context,
        top: Annotated[int, Field(ge=1, le=25, description="how many kernels (CPU: functions) to return, hottest first")] = 10,
    ) -> TraceResult:
        """Profile the workspace's benchmark; call before forming a hypothesis. GPU (CUPTI/Nsight Compute,
        rocprofv3): hottest kernels with calls, GPU time (us), share, registers, shared memory, occupancy,
        the target's GPU time (keep metric), bottleneck class, the repo's own kernels. CPU (py-spy):
        hottest Python functions with self/total time (ms, %) and hottest line, class cpu-bound. No
        profiler, or a CPU run too short to sample: available=false and notes saying what to do instead.
        """
        return await call(ctx, referee(ctx).kernel_trace_analysis, top)

    @tool(tools, "Warm up JIT caches", **MEASURING)
    async def warm_up_harness(ctx: Context) -> WarmupResult:
        """Pay JIT/compile cost before timing: runs the warm-up command twice on the workspace with the
        shared caches later runs use. Call after edits that recompile. Returns cold_s and warm_s."""
        return await call(ctx, referee(ctx).warm_up_harness)

    @tool(tools, "Measure what the session achieved", **READ_ONLY)
    async def measure_session_gain(
        ctx: Context,
        base: Annotated[str, Field(max_length=200, description="commit to measure against (default: the "
                                   "session's baseline commit)")] = "",
        head: Annotated[str, Field(max_length=200, description="commit to measure (default: BEST_COMMIT)")] = "",
    ) -> SessionGainResult:
        """The session's result, measured: its baseline commit against BEST_COMMIT (or base/head) in one
        paired run on one leased device under the session's rules; changes nothing. Call when the loop
        ends, before reporting a speed-up. Returns per-class change with bounds (+% = better), the ratio
        (x), GPU time where a profiler exists, and a headline (also in the Stop Summary and report).
        """
        return await call(ctx, referee(ctx).measure_session_gain, base or None, head or None)
