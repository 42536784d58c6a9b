"""commit_improvement (the commit gate): only the exact tree that got `improved`; run the format
command (in the workspace; a changed workspace becomes a new frozen snapshot, which is what is then
measured and committed); re-measure against BEST in the same lease, each run in a disposable
checkout verified afterwards (and re-profile if formatting changed the tree); commit the snapshot
tree + the server's performance.md only if still better (never a tree left after a run); then
BEST_COMMIT moves, the workspace is reset to the new commit and counters reset."""

from __future__ import annotations

from kopt_mcp import faults, vcs
from kopt_mcp.ledger import now_iso
from kopt_mcp.referee.attempt import AttemptMixin
from kopt_mcp.referee.core import Progress, RefereeError, operation
from kopt_mcp.referee.measure import raise_if_cancelled
from kopt_mcp.referee.ops import Tampered, protected_paths
from kopt_mcp.referee.report import perf_rows
from kopt_mcp.results import CommitResult
from kopt_mcp.rules.protect import touched_protected, unsafe_symlinks
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
            if vcs.snapshot(self.ws, s.best.commit, s.benchmark_outputs).tree != p.tree:
                raise RefereeError(
                    "the workspace changed since save_and_test ruled `improved` on attempt "
                    f"{p.attempt}: only the exact tested tree can be committed. Undo the edits, or call "
                    "save_and_test again (a new attempt), or revert_to_best")
            self._ctx = {"n": p.attempt, "target": p.target, "hypothesis": p.hypothesis, "warnings": [],
                         "changed": [], "runs": [], "tree": p.tree, "best_tree": vcs.tree_of(self.ws, s.best.commit)}
            s.in_progress = {"attempt": p.attempt, "tool": "commit_improvement", "since": now_iso()}
            self.save()
            formatted = False
            if self.cfg.format.command:
                if progress:
                    progress(0, 3, "running the format command")
                r = run_command(self.cfg.format.command, self.workspace_path, {}, self.cfg.format.timeout_s,
                                self.store.run_dir(p.attempt, "format") / "format.log", cancel=self.cancel,
                                pid_dir=self.pid_dir)
                raise_if_cancelled(r)
                if r.exit_code != 0:
                    raise RefereeError(f"the format command failed (exit {r.exit_code}): {r.log_tail[-500:]}")
                new = vcs.snapshot(self.ws, s.best.commit, s.benchmark_outputs).tree
                formatted = new != p.tree
                if formatted:
                    refused = self._formatted_snapshot(new)
                    if refused:
                        return self._not_kept(refused, formatted, [])
            faults.point("commit_improvement.after_format")
            if self.lease(progress).lease is None:
                raise RefereeError(f"no device to re-measure on: {s.stop_reason or 'cancelled'}")
            if progress:
                progress(1, 3, "re-measuring candidate and BEST in the same lease")
            try:
                cand = self._measure(self._ctx["tree"], "commit-candidate")
                best = self._measure(self._ctx["best_tree"], "commit-best")
            except Tampered as e:
                return self._not_kept(str(e), formatted, [])
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
                try:
                    keep = self._keep_metric()
                except Tampered as e:
                    return self._not_kept(str(e), formatted, d.classes)
                if not keep.kept:
                    return self._not_kept(keep.reason, formatted, d.classes)
                gpu_us = keep.gpu_candidate_us
            moved = self.workspace_moved(self._ctx["tree"])
            if moved:
                return self._not_kept(moved, formatted, d.classes)
            if progress:
                progress(2, 3, "committing code and performance.md")
            changes = {c.key: c.mean_pct for c in d.classes}
            title = message.strip() or p.hypothesis.strip() or f"kopt attempt {p.attempt}"
            rows = [r.model_dump() for r in perf_rows(
                "keep", "(this commit)", self.cfg.benchmark.command, p.target, p.kernels, cand.values(), gpu_us,
                changes, f"attempt {p.attempt}: {title} ({p.metric_used}: {d.reason})",
                class_gpu_us=self._ctx.get("class_gpu_us", p.candidate_class_gpu_us))]
            # what recovery adopts after a crash; the rows go into the `commit` record
            s.in_progress.update(metrics=cand.values(), gpu_us=gpu_us, rows=rows)
            self.save()
            self.write_performance(extra=[{"event": "commit", "rows": rows}])  # rendered from the ledger
            perf = self.workspace_path / "performance.md"
            faults.point("commit_improvement.after_perf_written")
            sha = vcs.commit_snapshot(self.ws, self._ctx["tree"], {"performance.md": perf.read_bytes()}, s.best.commit,
                                      f"{title}\n\nkopt-mcp attempt {p.attempt}, target {p.target}: {d.reason}")
            faults.point("commit_improvement.after_git_commit")
            self.adopt_best(p.attempt, sha, cand.values(), gpu_us, formatted=formatted,
                            classes=[c.model_dump() for c in d.classes], rows=rows)
            s.in_progress = None
            self.save()
            faults.point("commit_improvement.after_state_save")
            return CommitResult(committed=True, reason=f"committed: the re-measure still favours the candidate ({p.target} "
                                f"{d.target_deltas_pct[-1]:+.2f}%, no other class worse beyond {g.noise_pct:g}%); "
                                "the save_and_test verdict stands", commit=sha, best_commit=sha, formatted=formatted,
                                classes=d.classes, next_actions=next_actions(s))

    def _formatted_snapshot(self, tree: str) -> str | None:
        """The format command changed the workspace into `tree`: freeze it (hidden ref
        `.../attempts/NNNN-formatted`) and make it the tree measured and committed. Returns why it
        may not be (a protected file or an unsafe symlink in its diff), else None."""
        s, n = self.state, self._ctx["n"]
        _, changed = vcs.diff_tree(self.ws, s.best.commit, tree)
        hits = touched_protected(changed, protected_paths(self))
        links = vcs.symlinks(self.ws, tree)
        unsafe = unsafe_symlinks([x for x in changed if x in links], links, protected_paths(self))
        if hits or unsafe:
            return ("the format command changed " + "; ".join(
                ([f"protected file(s) {', '.join(hits)}"] if hits else []) + unsafe) +
                ": not committed; limit the format command to the kernel sources")
        ref = self.attempt_ref(n, "-formatted")
        vcs.freeze(self.ws, tree, s.best.commit, ref, f"kopt-mcp attempt {n}: formatted, the snapshot re-measured")
        self.store.log("snapshot", attempt=n, tree=tree, ref=ref, formatted=True)
        self._ctx["tree"] = tree
        return None

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
