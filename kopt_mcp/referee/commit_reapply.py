"""The commit step's re-apply phase (candidate slots): BEST moved since the verdict, so the candidate's
frozen snapshot is merged onto the newest BEST (referee/reapply.py: git's three-way merge) and then
measured against it by the commit step; overlapping edits are the verdict `conflict`."""

from __future__ import annotations

from kopt_mcp import vcs
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.reapply import reapply
from kopt_mcp.referee.report import format_note
from kopt_mcp.referee.runs import Attempt
from kopt_mcp.results import CommitResult
from kopt_mcp.rules.decision import Code
from kopt_mcp.session import next_actions
from kopt_mcp.testing import faults


def reapply_onto_best(sess: Session, a: Attempt, judged_against: str) -> CommitResult | None:
    """BEST moved from `judged_against` since the verdict: merge the attempt's frozen snapshot onto
    the newest BEST (referee.reapply). Clean: the workspace holds the merged tree, frozen as
    `.../attempts/NNNN-reapplied` and measured against the newest BEST by the caller (None is
    returned). Overlapping edits: the verdict `conflict` (candidate archived, workspace reset to
    the newest BEST, phase ready), returned as a not-committed CommitResult."""

    s, n = sess.books.state, a.n
    frozen = sess.where.ws.git.rev_parse(sess.where.attempt_ref(n)).strip()
    out = reapply(sess.where.ws, frozen, s.best.commit)
    if out.tree is None:
        return conflict(sess, a, judged_against, out.conflicts)
    vcs.reset_to(sess.where.ws, s.best.commit)
    vcs.restore_tree(sess.where.ws, out.tree)
    faults.point("commit_improvement.after_reapply")
    ref = sess.where.attempt_ref(n, "-reapplied")
    vcs.freeze(sess.where.ws, out.tree, s.best.commit, ref, f"kopt-mcp attempt {n}: re-applied onto the newest BEST")
    sess.books.store.log("snapshot", attempt=n, tree=out.tree, ref=ref, reapplied=True, judged_against=judged_against,
                         best_commit=s.best.commit)
    a.tree = out.tree
    return None


def conflict(sess: Session, a: Attempt, judged_against: str, paths: list[str]) -> CommitResult:
    """The verdict `conflict`: the candidate (its diff against the BEST it was judged against) is
    archived, the workspace reset to the newest BEST, the pending improvement dropped."""
    s = sess.books.state
    patch, _ = vcs.diff_tree(sess.where.ws, judged_against, a.tree)
    path = sess.books.store.archive(a.n, "conflict", patch)
    vcs.reset_to(sess.where.ws, s.best.commit)
    reason = (f"BEST moved from {judged_against[:12]} to {s.best.commit[:12]} since attempt {a.n} was judged, and "
              f"its change overlaps the newer BEST in {', '.join(paths) or 'some files'}: not committed (archived as "
              f"{path.name}). Start again from the newest BEST (the workspace is reset to it)")
    s.ruled(a.n, "conflict", a.target, reason)
    s.commit_refused()
    sess.books.record("attempt", attempt=a.n, verdict="conflict", code=str(Code.CONFLICT), reason=reason,
                      target=a.target, hypothesis=a.hypothesis, changed=paths, patch=str(path), reverted=True,
                      judged_against=judged_against, best_commit=s.best.commit)
    sess.books.save()
    return CommitResult(committed=False, reason=reason, code=Code.CONFLICT, commit=None, best_commit=s.best.commit,
                        formatted=False, classes=[], next_actions=next_actions(s),
                        **format_note(sess.what.cfg.format.command, False, ran=False))
