"""Re-applying a candidate onto a newer BEST (the serialized commit step of candidate slots).

A candidate is judged against the BEST_COMMIT of its verdict; when BEST has moved since (another
slot committed), the candidate's change (its frozen attempt commit, whose parent is the BEST it was
judged against) is merged onto the newest BEST with git's three-way merge (`git merge-tree
--write-tree`, no working tree touched). A clean merge gives the tree that must be re-measured
against the newest BEST before it may be committed; overlapping edits are a `conflict` (a verdict
of its own: the candidate is archived, never half merged)."""

from __future__ import annotations

from typing import NamedTuple

import git


class Reapplied(NamedTuple):
    """The merged tree id (None on conflict) and the conflicting repo paths (empty when clean)."""

    tree: str | None
    conflicts: list[str]


def reapply(ws: git.Repo, candidate_commit: str, new_best: str) -> Reapplied:
    """Merge `candidate_commit` (parent: the BEST it was judged against, an ancestor of `new_best`)
    onto commit `new_best`, in git's object store only. Returns Reapplied(tree, []) when clean,
    Reapplied(None, paths) on a conflict. Raises git.GitCommandError when git fails otherwise
    (a missing object), RuntimeError when git is older than 2.38 (no `merge-tree --write-tree`)."""
    status, out, err = ws.git.execute(
        ["git", "merge-tree", "--write-tree", "--name-only", "--no-messages", new_best, candidate_commit],
        with_extended_output=True, with_exceptions=False)
    lines = out.splitlines()
    if status == 0 and lines:
        return Reapplied(lines[0].strip(), [])
    if status == 1 and lines:
        return Reapplied(None, sorted({x.strip() for x in lines[1:] if x.strip()}))
    if "--write-tree" in err or "unknown option" in err:
        raise RuntimeError(f"git merge-tree --write-tree is needed to re-apply a candidate onto a newer BEST "
                           f"(git >= 2.38): {err.strip()[:300]}")
    raise git.GitCommandError(["git", "merge-tree"], status, err)
