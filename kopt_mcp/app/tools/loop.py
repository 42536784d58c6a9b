"""Tools that change the session: save_and_test, revert_to_best, commit_improvement, end_session."""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from kopt_mcp.app.tools._adapter import call, referee, tool
from kopt_mcp.app.tools.notify import announce_session_files
from kopt_mcp.results import CommitResult, EndSessionResult, RevertResult, VerdictResult

CHANGES = dict(read_only_hint=False, open_world_hint=False)


async def _call_and_announce(ctx: Context, fn, *args, **kwargs):
    """`call` a state-changing referee operation, then send resources/updated for the session's
    files (performance.md, charts, report) to subscribed clients."""
    result = await call(ctx, fn, *args, **kwargs)
    await announce_session_files(ctx)
    return result


def register(tools: list[Tool]) -> None:
    @tool(tools, "Test a candidate and get the verdict", destructive_hint=True, idempotent_hint=False, **CHANGES)
    async def save_and_test(
        ctx: Context,
        target: Annotated[str, Field(min_length=1, max_length=200, description=(
            'config class aimed at, e.g. "n=4096,dtype=float16" (keys as in status), or "global"'))] = "global",
        hypothesis: Annotated[str, Field(max_length=1000, description="why it should be faster, one sentence")] = "",
        rounds: Annotated[int | None, Field(ge=1, le=100, description=(
            "most candidate runs for this verdict, in place of [gates] max_rounds (e.g. a promising tie measured "
            "longer; run_benchmark's baseline `detectable.rounds_for` says how many a gain needs); at most [gates] "
            "max_rounds_asked"))] = None,
    ) -> VerdictResult:
        """Submit the workspace's edits as a candidate: archived, protected files refused, candidate
        and BEST measured in one device lease under the correctness, noise and keep-metric rules. Verdicts: improved (call commit_improvement), incorrect (repair, call again),
        tie/regressed/divergent/failed/rejected/abandoned (reverted; a tie that fixes correctness:
        commit_improvement(neutral_reason=...)). Returns per-class deltas (+% = better) and ratios (x),
        the target's interval, next_actions.
        """
        return await _call_and_announce(ctx, referee(ctx).save_and_test, target, hypothesis, rounds=rounds)

    @tool(tools, "Revert the workspace to BEST_COMMIT", destructive_hint=True, idempotent_hint=True, **CHANGES)
    async def revert_to_best(
        ctx: Context,
        reason: Annotated[str, Field(max_length=1000, description="why, for the ledger")] = "",
    ) -> RevertResult:
        """Drop the workspace's edits: the diff is archived first, then the workspace is reset to
        BEST_COMMIT. Returns the archived patch and the changed files."""
        return await _call_and_announce(ctx, referee(ctx).revert_to_best, reason, progress=False)

    @tool(tools, "Commit the improved candidate", destructive_hint=False, idempotent_hint=False, **CHANGES)
    async def commit_improvement(
        ctx: Context,
        message: Annotated[str, Field(max_length=500, description="commit title (default: the hypothesis)")] = "",
        neutral_reason: Annotated[str, Field(max_length=500, description=(
            'keep the latest `tie` as neutral, saying why by name (e.g. "correctness fix: non-1-D weights"): '
            "committed only where no class is worse beyond the noise threshold; never counted as a gain"))] = "",
    ) -> CommitResult:
        """Commit the exact tree save_and_test ruled improved: format, re-measure with the verdict's
        metric and rule, on a GPU confirm the gain out of process (ncu / rocprofv3), commit code +
        performance.md only if it holds; BEST_COMMIT moves. Device busy: an error, call again. With `neutral_reason` after a `tie`: the
        tested tree kept as neutral, never a gain (code neutral_kept / neutral_refused_*). Returns
        committed, neutral, reason, code, commit, cost."""
        return await _call_and_announce(ctx, referee(ctx).commit_improvement, message, neutral_reason=neutral_reason)

    @tool(tools, "End the session on purpose", destructive_hint=True, idempotent_hint=False, **CHANGES)
    async def end_session(
        ctx: Context,
        why: Annotated[str, Field(max_length=300, description="why you end it, one sentence (joins the stop "
                                  "reason)")] = "",
    ) -> EndSessionResult:
        """Call when you decide the loop is done. Measures the baseline commit vs BEST_COMMIT in one paired
        run (as measure_session_gain), writes the Stop Summary (reason "ended by the agent", with the gain)
        to performance.md and commits it; the session stops and candidate tools refuse. Refused while a
        candidate is pending (improved or repairing) or edits are untested. Returns the reason, BEST_COMMIT,
        the summary and its commit, the gain (null with gain_note: no keep, no device)."""
        return await _call_and_announce(ctx, referee(ctx).end_session, why)
