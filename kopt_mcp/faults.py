"""Named fault-injection points for crash-safety tests. TEST-ONLY.

`point(name)` kills this process with SIGKILL (no clean-up, no atexit, no finally: exactly what a
power cut or an OOM kill does) when the environment variable `KOPT_FAULT` equals `name`. Otherwise
it is a no-op; its whole cost is one environment lookup. Never set `KOPT_FAULT` outside tests.

Points (see tests/test_crash.py, and `RefereeBase._recover` for what a restart does after each):

save_and_test.after_archive        the candidate's patch is archived as `pending`, state saved
save_and_test.after_candidate_run  the candidate was measured
save_and_test.after_best_run       BEST was measured in the same lease
save_and_test.before_revert        a verdict that reverts is known, the tree is still the candidate
save_and_test.after_revert         the tree is back at BEST, the state not saved yet
commit_improvement.after_format    the format command ran (also reached without one)
commit_improvement.after_remeasure candidate and BEST re-measured
commit_improvement.after_perf_written  performance.md has the keep rows, nothing committed
commit_improvement.after_git_commit    the branch has the new commit, the state still the old BEST
commit_improvement.after_state_save    everything saved (nothing left to recover)
baseline.after_perf_written        performance.md has the baseline rows, nothing committed
baseline.after_git_commit          the branch has the `kopt: baseline` commit, the state not saved
stop.after_perf_written            stopped state saved, the Stop Summary in performance.md, not committed
stop.after_git_commit              the Stop Summary committed, the marker not cleared
"""

from __future__ import annotations

import os
import signal

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
    "commit_improvement.after_state_save",
)
BASELINE_POINTS = ("baseline.after_perf_written", "baseline.after_git_commit")
STOP_POINTS = ("stop.after_perf_written", "stop.after_git_commit")


def point(name: str) -> None:
    """SIGKILL this process when `KOPT_FAULT == name` (test-only); a no-op otherwise."""
    if os.environ.get("KOPT_FAULT") == name:
        os.kill(os.getpid(), signal.SIGKILL)
