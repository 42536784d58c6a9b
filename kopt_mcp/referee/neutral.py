"""A neutral keep (issue 36 item 9): commit_improvement(neutral_reason=...) after a `tie` commits the
tie's exact tested tree (frozen at save_and_test) on BEST_COMMIT, where rules/commit.py neutral_keep
allows it: a reason given by name, the latest verdict a tie judged against the same BEST, no class
worse beyond the noise threshold. Nothing is measured again (the tie's rounds are the evidence, and a
neutral keep claims no gain). The commit message, its performance.md rows (status `neutral`) and the
ledger's `commit` record (code neutral_kept) say `neutral`; the state counts it in `kept_neutral`,
never in `kept`, so the session gain, performance.md and the Stop Summary never count it as a gain.

Not covered: a server killed between the git commit and the state save (the neutral keep has no job
marker for recovery to finish it: the branch then holds a commit the state does not know)."""

from __future__ import annotations

from kopt_mcp import vcs
from kopt_mcp.errors import RefereeError, SessionError
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.recovery import adopt_best
from kopt_mcp.referee.report import perf_rows
from kopt_mcp.referee.slots import best_lock, sync
from kopt_mcp.results import CommitResult
from kopt_mcp.results_change import ClassChange
from kopt_mcp.rules.commit import neutral_keep, pooled_best
from kopt_mcp.rules.percent import ratio_shown
from kopt_mcp.session import Phase, next_actions, require


def keep_neutral(sess: Session, neutral_reason: str, message: str = "") -> CommitResult:
    """Keep the latest `tie` as neutral, or say why not (code neutral_refused_*; nothing changes then).
    Raises SessionError outside phase ready (a candidate pending or under repair, the session stopped),
    RefereeError when the workspace holds edits or is on another branch."""
    s = sess.books.state
    if s.phase == Phase.stopped:
        require(s, "commit_improvement")  # raises with the stop's words
    if s.phase != Phase.ready:
        raise SessionError(f"a neutral keep needs phase ready (phase {s.phase.value}): commit or revert the pending "
                           "candidate first; without neutral_reason commit_improvement keeps an improved one")
    sess.where.check_branch()
    sync(sess)
    t = s.tie if s.last is not None and s.tie is not None and s.tie.attempt == s.last.attempt else None
    classes = [ClassChange.model_validate(c) for c in (t.classes if t else [])]
    d = neutral_keep(neutral_reason, s.last.verdict if s.last else None, t is not None and t.base == s.best.commit,
                     {c.key: c.mean_pct for c in classes if c.mean_pct is not None}, t.target_pct if t else None,
                     sess.what.policy.noise_pct, {c.key: c.ratio_x for c in classes})
    if d.outcome != "commit" or t is None:
        sess.books.record("commit_refused", attempt=s.last.attempt if s.last else None, code=str(d.code),
                          reason=d.reason)
        sess.books.save()
        return CommitResult(committed=False, reason=d.reason, code=d.code, commit=None, best_commit=s.best.commit,
                            formatted=False, classes=classes, next_actions=next_actions(s))
    _, changed = vcs.diff_against(sess.where.ws, s.best.commit)
    if changed:
        raise RefereeError(f"the workspace has edits ({', '.join(changed[:5])}): a neutral keep commits the tie's "
                           "tested tree; revert_to_best first (the edits are archived), then call again")
    title = message.strip() or t.hypothesis.strip() or f"kopt attempt {t.attempt}"
    metrics = pooled_best(t.candidate_run_metrics) or dict(s.best.metrics)
    rows = [r.model_dump() for r in perf_rows(
        "neutral", "(this commit)", sess.what.cfg.benchmark.command, t.target, s.best.kernels, metrics, s.best.gpu_us,
        {c.key: c.mean_pct for c in classes if c.mean_pct is not None},
        f"attempt {t.attempt}: {title} (neutral keep, not a gain: {' '.join(neutral_reason.split())})")]
    per_class = "; ".join(f"{c.key} {ratio_shown(c.mean_pct, c.ratio_x)}" for c in classes if c.mean_pct is not None)
    text = (f"{title}\n\nkopt-mcp attempt {t.attempt}, target {t.target}: kept as neutral (not a gain): "
            f"{' '.join(neutral_reason.split())}\nsave_and_test verdict: tie; per class {per_class}\n{d.reason}\n")
    with best_lock(sess):
        sess.write_performance(extra=[{"event": "commit", "rows": rows}])
        perf = (sess.where.workspace_path / "performance.md").read_bytes()
        sha = vcs.commit_snapshot(sess.where.ws, t.tree, {"performance.md": perf}, s.best.commit, text)
        s.record_best_runs(t.candidate_run_metrics, new_best=True)
        adopt_best(sess, t.attempt, sha, metrics, s.best.gpu_us, code=str(d.code), neutral=True,
                   classes=[c.model_dump() for c in classes], rows=rows)
        sess.books.save()
    return CommitResult(committed=True, neutral=True, reason=d.reason, code=d.code, commit=sha, best_commit=sha,
                        formatted=False, classes=classes, next_actions=next_actions(s),
                        format_status="not_run", formatted_reason="a neutral keep commits the tie's tested tree as it "
                        "was measured: the [format] command does not run")
