"""Tools that measure without a verdict: run_benchmark, kernel_trace_analysis, warm_up_harness."""

from mcp.server.mcpserver import Context, MCPServer

from kopt_mcp.results import BenchmarkResult, TraceResult, WarmupResult
from kopt_mcp.tools._adapter import MEASURING, call, referee, tool


def register(mcp: MCPServer) -> None:
    @tool(mcp, "Run the fixed benchmark", **MEASURING)
    async def run_benchmark(ctx: Context) -> BenchmarkResult:
        """Run the session's fixed benchmark command once on a leased device. No verdict, nothing kept.

        First call of a session: measures unmodified BEST_COMMIT and records it as the baseline (per
        config class, written to performance.md; with a profiler also its GPU kernel time). Later calls:
        a quick check of the workspace as it is, with the change vs BEST per class (+% = better; a
        single run, so within the noise threshold it means nothing: use save_and_test for a verdict).
        Returns: ok, gate (ok|failed|incorrect) and reason, per-class metric + correctness + error
        columns, vs_best_pct, exit code, duration (s), log path and tail, baseline_recorded, next_actions.
        """
        return await call(ctx, referee(ctx).run_benchmark)

    @tool(mcp, "Profile the kernels (trace)", **MEASURING)
    async def kernel_trace_analysis(ctx: Context, top: int = 10) -> TraceResult:
        """Run the fixed benchmark on the workspace under the vendor profiler and report the hottest
        kernels. Call it before forming a hypothesis. On NVIDIA (backend "cupti+ncu" where both are
        installed) the benchmark runs twice: the times (calls, total/average/median us, share) come
        from the CUPTI kernel trace (the keep metric's source, no replay), then Nsight Compute
        (--clock-control none) adds its metrics to the kernels of the same name; with only one of the
        two, that one alone. On AMD: the rocprofv3 kernel trace.

        Args: top: how many kernels to return (hottest first).
        Returns per kernel: name and short_name, calls, total, average and median per-launch GPU time
        (us; median_us null where the profiler kept no per-launch times), share of GPU time (%),
        registers per thread, shared memory per block (bytes), block/grid size, and in `extra`
        SM/DRAM throughput (% of peak), achieved occupancy (%) and occupancy limiters where measured;
        plus the target kernel(s) and their GPU time (the keep metric); `notes` says which kernels
        got no metrics. On a device without a profiler: available = false and a note (the keep
        metric is then the script metric).
        """
        return await call(ctx, referee(ctx).kernel_trace_analysis, top)

    @tool(mcp, "Warm up JIT caches", **MEASURING)
    async def warm_up_harness(ctx: Context) -> WarmupResult:
        """Pay JIT/compile cost once before anything is timed: runs the warm-up command (default: the
        benchmark) twice on the workspace with the per-repository shared caches (Triton, torch
        extensions, CUDA, MIOpen) that every later run also uses. Call after edits that trigger
        recompilation. Returns cold_s and warm_s (wall seconds), ok, the cache folders, the log tail.
        """
        return await call(ctx, referee(ctx).warm_up_harness)
