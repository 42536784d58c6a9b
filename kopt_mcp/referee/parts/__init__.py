"""The parts a `Session` (referee/core.py) is built from, one job each:

    where.py  `Layout` / `Where`: where the session's things live (repository, tag, slot, branch,
              refs, workspace and BEST worktree, state folder, caches) and the workspace's git repo
    what.py   `What`: what is measured and judged: the frozen config and the rules' `Policy`
    books.py  `Books`: the session's state (state.json) and ledger, committed together at `save`
    jobs.py   `Jobs`: the executor, this call's job lease and its device, the cancel event

`opening.open_parts` builds them whole; referee operations take the parts they use.
"""

from kopt_mcp.referee.parts.books import Books
from kopt_mcp.referee.parts.jobs import Jobs
from kopt_mcp.referee.parts.what import What
from kopt_mcp.referee.parts.where import Layout, Where

__all__ = ["Books", "Jobs", "Layout", "What", "Where"]
