"""commit_improvement (the commit gate): only the exact tree that got `improved`; run the format
command; re-measure against BEST in the same lease (and re-profile if formatting changed the tree);
commit code + performance.md only if still better; then BEST_COMMIT moves and counters reset."""

from __future__ import annotations

from kopt_mcp import faults, vcs
from kopt_mcp.ledger import now_iso
from kopt_mcp.referee.attempt import AttemptMixin
from kopt_mcp.referee.core import Progress, RefereeError, operation
from kopt_mcp.referee.measure import raise_if_cancelled
from kopt_mcp.referee.report import perf_rows
from kopt_mcp.results import CommitResult
from kopt_mcp.rules.verdict import Round, decide
from kopt_mcp.runner import run_command
from kopt_mcp.session import Phase, next_actions, require


class CommitMixin(AttemptMixin):
    @operation
    def commit_improvement(self, message: str = "", progress: Progress | None = None) -> CommitResult:
        """Commit the pending improvement if it survives formatting and a re-measure. Cancelled:
        the exact tested tree is restored and the phase stays `improved`."""
        try:
            return self._commit(message, progress)
        finally:
            # Cancelled, or any error: finish or undo exactly as a restart would (adopt a commit that
            # already exists, else restore the exact tested tree; the phase stays `improved`)
            if self.state.in_progress and self.state.in_progress.get("tool") == "commit_improvement":
                self._recover()

    def _commit(self, message: str, progress: Progress | None) -> CommitResult:
        with self.lock:
            require(self.state, "commit_improvement")
            s, p = self.state, self.state.pending
            self.check_branch()
            if vcs.snapshot_tree(self.ws, s.best.commit) != p.tree:
                raise RefereeError(
                    "the workspace changed since save_and_test ruled `improved` on attempt "
                    f"{p.attempt}: only the exact tested tree can be committed. Undo the edits, or call "
                    "save_and_test again (a new attempt), or revert_to_best")
            self._ctx = {"n": p.attempt, "target": p.target, "hypothesis": p.hypothesis, "warnings": [],
                         "changed": [], "runs": []}
            s.in_progress = {"attempt": p.attempt, "tool": "commit_improvement", "since": now_iso()}
            self.save()
            formatted = False
            if self.cfg.format.command:
                if progress:
                    progress(0, 3, "running the format command")
                r = run_command(self.cfg.format.command, self.workspace_path, {}, self.cfg.format.timeout_s,
                                self.store.run_dir(p.attempt, "format") / "format.log", cancel=self.cancel)
                raise_if_cancelled(r)
                if r.exit_code != 0:
                    raise RefereeError(f"the format command failed (exit {r.exit_code}): {r.log_tail[-500:]}")
                formatted = vcs.snapshot_tree(self.ws, s.best.commit) != p.tree
            faults.point("commit_improvement.after_format")
            if self.lease(progress).lease is None:
                raise RefereeError(f"no device to re-measure on: {s.stop_reason or 'cancelled'}")
            if progress:
                progress(1, 3, "re-measuring candidate and BEST in the same lease")
            cand = self._measure(self.workspace_path, "commit-candidate")
            best = self._measure(self.best_path, "commit-best")
            faults.point("commit_improvement.after_remeasure")
            g = self.cfg.gates
            if cand.gate.kind != "ok" or best.gate.kind != "ok":
                return self._not_kept(f"re-measure failed: {(cand if cand.gate.kind != 'ok' else best).gate.reason}",
                                      formatted, [])
            # one round, no repeats: the rule here is only "still better, no class worse beyond noise"
            d = decide([Round(best=best.values(), candidate=cand.values())], p.target,
                       self.cfg.benchmark.higher_is_better, self.policy().model_copy(update={"max_rounds": 1}),
                       s.noise_history)
            worse = [c.key for c in d.classes if c.key != p.target and c.mean_pct <= -g.noise_pct]
            if d.target_deltas_pct[-1] <= 0 or worse:
                return self._not_kept(f"no longer better after formatting and re-measure: target {p.target} "
                                      f"{d.target_deltas_pct[-1]:+.2f}%" + (f", worse: {', '.join(worse)}" if worse else ""), formatted,
                                      d.classes)
            gpu_us = p.candidate_gpu_us
            if formatted and gpu_us is not None:
                self._ctx["decision"] = d
                keep = self._keep_metric()
                if not keep.kept:
                    return self._not_kept(keep.reason, formatted, d.classes)
                gpu_us = keep.gpu_candidate_us
            if progress:
                progress(2, 3, "committing code and performance.md")
            changes = {c.key: c.mean_pct for c in d.classes}
            title = message.strip() or p.hypothesis.strip() or f"kopt attempt {p.attempt}"
            rows = [r.model_dump() for r in perf_rows(
                "keep", "(this commit)", self.cfg.benchmark.command, p.target, p.kernels, cand.values(), gpu_us,
                changes, f"attempt {p.attempt}: {title} ({p.metric_used}: {d.reason})")]
            # what recovery adopts after a crash; the rows go into the `commit` record
            s.in_progress.update(metrics=cand.values(), gpu_us=gpu_us, rows=rows)
            self.save()
            self.write_performance(extra=[{"event": "commit", "rows": rows}])  # rendered from the ledger
            faults.point("commit_improvement.after_perf_written")
            sha = vcs.commit_all(self.ws, f"{title}\n\nkopt-mcp attempt {p.attempt}, target {p.target}: {d.reason}",
                                 base=s.best.commit)
            faults.point("commit_improvement.after_git_commit")
            self.adopt_best(p.attempt, sha, cand.values(), gpu_us, formatted=formatted,
                            classes=[c.model_dump() for c in d.classes], rows=rows)
            s.in_progress = None
            self.save()
            faults.point("commit_improvement.after_state_save")
            return CommitResult(committed=True, reason=d.reason, commit=sha, best_commit=sha, formatted=formatted,
                                classes=d.classes, next_actions=next_actions(s))

    def _not_kept(self, reason: str, formatted: bool, classes) -> CommitResult:
        s, p = self.state, self.state.pending
        patch, _ = vcs.diff_against(self.ws, s.best.commit)
        path = self.store.archive(p.attempt, "improved-not-kept", patch)
        vcs.reset_to(self.ws, s.best.commit)
        faults.point("commit_improvement.after_refused_reset")
        s.phase, s.pending, s.in_progress = Phase.ready, None, None
        s.regressions = s.regressions.reset()
        self.record("commit_refused", attempt=p.attempt, reason=reason, patch=str(path))
        self.save()
        return CommitResult(committed=False, reason=reason, commit=None, best_commit=s.best.commit,
                            formatted=formatted, classes=classes, next_actions=next_actions(s))
