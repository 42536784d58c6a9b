"""Named fault-injection points for crash-safety tests. TEST-ONLY.

`point(name)` kills this process with SIGKILL (no clean-up, no atexit, no finally: exactly what a
power cut or an OOM kill does) when the environment variable `KOPT_FAULT` names it: `name` (its
first hit in this process) or `name#k` (its k-th hit, k >= 1). With `KOPT_FAULT_TRACE` set to a file
path, every point reached is appended to that file (one name per line, written before the kill
check) so a test can list the points a scenario passes and then kill at each. Otherwise a no-op:
its whole cost is two environment lookups. Never set these variables outside tests.

A point sits after every write of a transition (see `kopt_mcp.referee.core` for the design that
makes each kill recoverable):

- `state.after_save`             state.json replaced (the commit point of a transition)
- `ledger.after_append:<event>`  one ledger record appended
- `archive.after_write:<label>`, `archive.after_relabel:<label>`   an attempt's patch written / renamed
- `save_and_test.*`, `commit_improvement.*`, `baseline.*`, `stop.*`, `revert.*`, `recover.*`: the
  git operations and performance.md writes of each transition (the names below).
"""

from __future__ import annotations

import os
import signal
from collections import Counter

#: the points of save_and_test and commit_improvement on the happy path of tests/referee/test_crash.py
POINTS = (
    "save_and_test.after_archive",
    "save_and_test.after_candidate_run",
    "save_and_test.after_best_run",
    "save_and_test.before_revert",
    "save_and_test.after_revert",
    "commit_improvement.after_format",
    "commit_improvement.after_remeasure",
    "commit_improvement.after_perf_written",
    "commit_improvement.after_git_commit",
    "commit_improvement.after_best_worktree",
    "commit_improvement.after_state_save",
)
BASELINE_POINTS = ("baseline.after_perf_written", "baseline.after_git_commit", "baseline.after_best_worktree")
STOP_POINTS = ("stop.after_perf_written", "stop.after_git_commit")

_hits: Counter[str] = Counter()


def point(name: str) -> None:
    """Trace `name` (KOPT_FAULT_TRACE) and SIGKILL this process when KOPT_FAULT names this hit
    (`name` or `name#k`); a no-op otherwise (test-only)."""
    want, trace = os.environ.get("KOPT_FAULT"), os.environ.get("KOPT_FAULT_TRACE")
    if not want and not trace:
        return
    _hits[name] += 1
    if trace:
        with open(trace, "a", encoding="utf-8") as f:
            f.write(name + "\n")
    if want == name and _hits[name] == 1 or want == f"{name}#{_hits[name]}":
        os.kill(os.getpid(), signal.SIGKILL)
