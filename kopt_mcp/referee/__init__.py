"""The referee: the domain operations behind the MCP tools (one per tool), composed from mixins:

core.py (session open/resume, locks, lease, stop) -> ops.py (status, gate, run_benchmark/baseline,
trace, warm-up, revert, get_attempt) -> attempt.py (save_and_test) -> commit.py (commit_improvement).
"""

from kopt_mcp.referee.commit import CommitMixin
from kopt_mcp.referee.core import RefereeError


class Referee(CommitMixin):
    """One optimization session on one repository (see the mixins for each operation)."""


__all__ = ["Referee", "RefereeError"]
