"""Tools that change the session: save_and_test, revert_to_best, commit_improvement."""

from mcp.server.mcpserver import Context, MCPServer

from kopt_mcp.results import CommitResult, RevertResult, VerdictResult
from kopt_mcp.tools._adapter import call, referee, tool


def register(mcp: MCPServer) -> None:
    @tool(
        mcp,
        "Test a candidate and get the verdict",
        read_only_hint=False,
        destructive_hint=True,
        idempotent_hint=False,
        open_world_hint=False,
    )
    async def save_and_test(ctx: Context, target: str = "global", hypothesis: str = "") -> VerdictResult:
        """Submit the workspace's current edits as a candidate and get the server's verdict.

        Args: target: the config class the change aims at (a key like "M=4096,N=128,dtype=float16" as
        listed by status/run_benchmark) or "global" (geometric mean over classes); hypothesis: one
        sentence on why it should be faster (recorded in the ledger and performance.md).
        The server archives the diff (attempts/NNNN-<verdict>.patch in the session's state folder), rejects edits to protected
        files, leases an idle GPU, runs the candidate and BEST_COMMIT in the same lease, applies the
        correctness gate, the noise rule (taking a confirming measurement itself when needed), the
        divergence check and the keep metric (profiler GPU time of the target kernels where a profiler
        exists: BEST profiled just before and just after the candidate, the gain paired launch by launch
        against their mean and required to clear a floor that rises with BEST's own measured spread).
        Verdicts: improved (tree kept: call commit_improvement), incorrect (tree kept: repair it and call
        again), tie / regressed / divergent / failed / rejected / abandoned (archived and reverted).
        Returns the per-class deltas (% , + = better) per round, GPU times (us), reason, repairs_left,
        consecutive regressions, whether the session stopped, and next_actions.
        """
        return await call(ctx, referee(ctx).save_and_test, target, hypothesis)

    @tool(
        mcp,
        "Revert the workspace to BEST_COMMIT",
        read_only_hint=False,
        destructive_hint=True,
        idempotent_hint=True,
        open_world_hint=False,
    )
    async def revert_to_best(ctx: Context, reason: str = "") -> RevertResult:
        """Drop the workspace's edits: archive the working diff first (nothing is lost), then reset the
        workspace to BEST_COMMIT. Use it to give up a repair or an improved candidate you do not want.
        Returns the archived patch path, the changed files and BEST_COMMIT.
        """
        return await call(ctx, referee(ctx).revert_to_best, reason, progress=False)

    @tool(
        mcp,
        "Commit the improved candidate",
        read_only_hint=False,
        destructive_hint=False,
        idempotent_hint=False,
        open_world_hint=False,
    )
    async def commit_improvement(ctx: Context, message: str = "") -> CommitResult:
        """Commit the candidate that save_and_test ruled `improved` (the commit gate). Only the exact
        tested tree is accepted; the format command runs, the candidate is re-measured against BEST in
        the same lease, and code + performance.md are committed only if still better. Then BEST_COMMIT
        moves and the counters reset. Args: message: the commit title (default: the hypothesis).
        Returns committed, reason, the new commit, formatted, per-class deltas of the re-measure.
        """
        return await call(ctx, referee(ctx).commit_improvement, message)
