"""save_and_test: archive the candidate and freeze it as a commit on a hidden ref
(`refs/kopt/<tag>/attempts/NNNN`), check protected paths and symlinks, measure candidate vs BEST in
the same lease (candidate, BEST; then BEST, candidate for a confirming round), each run in a
disposable checkout of its own snapshot that is verified afterwards, apply every gate and return
the verdict. Every outcome but `improved` and `incorrect` reverts (after archiving)."""

from __future__ import annotations

from kopt_mcp import faults, vcs
from kopt_mcp.ledger import now_iso
from kopt_mcp.profilers.base import (ProfilerError, exact_names_regex, target_durations, target_gpu_time,
                                     target_launches)
from kopt_mcp.referee.core import Cancelled, Progress, RefereeError, StateSaveError, operation
from kopt_mcp.referee.measure import Measurement, measure_snapshot, profile_snapshot
from kopt_mcp.referee.ops import OpsMixin, Tampered, protected_paths
from kopt_mcp.results import VerdictResult
from kopt_mcp.rules.keep import judge_groups
from kopt_mcp.rules.protect import FileChange, describe, touched_protected, unsafe_symlinks
from kopt_mcp.rules.repair import after_incorrect
from kopt_mcp.rules.stop import RegressionNote, should_stop
from kopt_mcp.rules.verdict import (GLOBAL, KeepDecision, Round, VerdictError, apply_keep_metric, decide,
                                   gpu_gain_floor)
from kopt_mcp.session import LastVerdict, PendingImprovement, Phase, next_actions, require


class AttemptMixin(OpsMixin):
    @operation
    def save_and_test(self, target: str = GLOBAL, hypothesis: str = "",
                      progress: Progress | None = None) -> VerdictResult:
        """Test the workspace's candidate against BEST_COMMIT and rule on it (see module docstring)."""
        with self.lock:
            require(self.state, "save_and_test")
            s = self.state
            keys = list(s.best.metrics)
            if target != GLOBAL and target not in keys:
                raise RefereeError(f"target {target!r} is no config class; use 'global' or one of: {', '.join(keys)}")
            self.check_branch()
            warnings = self.moved_head_warnings()
            if self.config.changed():
                warnings.append("kopt.toml changed on disk; the frozen config of session start still applies")
            snap = vcs.snapshot(self.ws, s.best.commit, s.benchmark_outputs)
            patch, changed = vcs.diff_tree(self.ws, s.best.commit, snap.tree)
            if snap.left_out:
                warnings.append(_left_out_warning(snap.left_out))
            if not changed:
                raise RefereeError("the workspace has no change against BEST_COMMIT: edit the kernel in "
                                   f"{self.workspace_path} first, then call save_and_test")
            n = s.next_attempt
            s.next_attempt += 1
            # state first, then the patch: a crash in between leaves an attempt number that recovery
            # archives from the (untouched) tree; never a patch a later attempt could overwrite
            s.in_progress = {"attempt": n, "tool": "save_and_test", "since": now_iso()}
            self.save()
            self.store.archive(n, "pending", patch)
            faults.point("save_and_test.after_archive")
            frozen = vcs.freeze(self.ws, snap.tree, s.best.commit, self.attempt_ref(n),
                                f"kopt-mcp attempt {n}: the tested snapshot")
            self._ctx = {"n": n, "target": target, "hypothesis": hypothesis, "warnings": warnings,
                         "changed": changed, "runs": [], "tree": snap.tree,
                         "best_tree": vcs.tree_of(self.ws, s.best.commit)}
            self.store.log("snapshot", attempt=n, commit=frozen, tree=snap.tree, ref=self.attempt_ref(n))
            try:
                try:
                    return self._judge(progress)
                except Tampered as e:
                    return self._finish("rejected", str(e), revert=True)
            except Cancelled:
                path = self.store.relabel(n, "pending", "cancelled")  # the tree stays as it was: nothing lost
                self.record("attempt", attempt=n, verdict="cancelled", target=target, hypothesis=hypothesis,
                            changed=changed, runs=self._ctx["runs"], reverted=False, patch=str(path))
                s.in_progress = None
                self.save()
                raise
            except StateSaveError:
                raise  # the saved job marker stays: the next call recovers the attempt
            except BaseException:
                if s.in_progress:  # an error before the verdict: the candidate stays in place
                    s.in_progress = None
                    self.save()
                raise

    # -- the steps -------------------------------------------------------------------------

    def _judge(self, progress: Progress | None) -> VerdictResult:
        c = self._ctx
        hits = touched_protected(c["changed"], protected_paths(self))
        if hits:
            return self._finish("rejected", f"the candidate changes protected file(s) {', '.join(hits)}: the "
                                "benchmark, oracle, config and performance.md are fixed for the session; make "
                                "the change in the kernel only", revert=True)
        links = vcs.symlinks(self.ws, c["tree"])
        unsafe = unsafe_symlinks([p for p in c["changed"] if p in links], links, protected_paths(self))
        if unsafe:
            return self._finish("rejected", "; ".join(unsafe) + ": a symlink may not lead into a protected path "
                                "or out of the repository (writes through it would change what is fixed or escape "
                                "the checkout); copy the file instead", revert=True)
        gate = self.lease(progress, stop_now=False)
        if gate.lease is None:
            stop = None if gate.reason == "cancelled" else f"no idle GPU: {gate.reason}"
            return self._finish("failed", stop or "cancelled while waiting for a GPU", revert=True, stop=stop)
        # a profiler that records each launch gives a second, independent paired test (the keep metric)
        try:
            prof = self.profiler()
            screening, profiled = prof.per_launch, prof.name != "none"
        except ProfilerError:  # reported where the keep metric runs; the script test stays strict
            screening = profiled = False
        # progress counts runs: the first pair, at most max_rounds - 1 more pairs, then 3 profiled runs
        total = 2.0 + 2.0 * (self.cfg.gates.max_rounds - 1) + (3.0 if profiled else 0.0)
        if progress:
            progress(0, total, f"attempt {c['n']}: run 1: the candidate")
        cand = self._measure(c["tree"], "candidate")
        faults.point("save_and_test.after_candidate_run")
        if cand.gate.kind == "failed":
            return self._finish("failed", cand.gate.reason, revert=True, reset=True)
        if cand.gate.kind == "incorrect":
            if cand.table is not None:  # per-class error numbers for the agent's repair
                c["class_errors"] = cand.table.failing_errors()
                summary = cand.table.failing_summary()
                return self._incorrect(f"{cand.gate.reason}" + (f" ({summary})" if summary else ""))
            return self._incorrect(cand.gate.reason)
        if progress:
            progress(1, total, f"attempt {c['n']}: run 2: BEST_COMMIT in the same lease")
        best = self._measure(c["best_tree"], "best")
        faults.point("save_and_test.after_best_run")
        if best.gate.kind != "ok":
            raise RefereeError(f"BEST_COMMIT itself failed to run just now ({best.gate.reason}): the machine "
                               "changed, not the candidate. The candidate is still in place; call save_and_test again")
        rounds = [Round(best=best.values(), candidate=cand.values())]
        policy, s = self.policy(screening=screening), self.state
        try:
            d = decide(rounds, c["target"], self.cfg.benchmark.higher_is_better, policy, s.noise_history)
            while d.needs_round:
                if progress:
                    progress(2 * len(rounds), total, f"attempt {c['n']}: runs {2 * len(rounds) + 1}-"
                             f"{2 * len(rounds) + 2}: paired round {len(rounds) + 1} of at most {policy.max_rounds} "
                             f"({d.reason})")
                b2 = self._measure(c["best_tree"], "best")
                c2 = self._measure(c["tree"], "candidate")
                if b2.gate.kind != "ok" or c2.gate.kind != "ok":
                    bad = c2 if c2.gate.kind != "ok" else b2
                    return self._finish("failed", f"the confirming run failed: {bad.gate.reason}", revert=True, reset=True)
                rounds.append(Round(best=b2.values(), candidate=c2.values()))
                d = decide(rounds, c["target"], self.cfg.benchmark.higher_is_better, policy, s.noise_history)
        except VerdictError as e:
            return self._finish("failed", str(e), revert=True, reset=True)
        s.record_best_runs([r.best for r in rounds])  # BEST ran len(rounds) times in this lease
        c.update(decision=d, rounds=len(rounds), cand_values=rounds[-1].candidate)
        if d.outcome != "improved":
            return self._finish(d.outcome, d.reason, revert=True, reset=d.outcome != "regressed")
        if progress and profiled:
            total = 2.0 * len(rounds) + 3.0  # no more script rounds: the profiled runs are the rest
            progress(2 * len(rounds), total, f"attempt {c['n']}: runs {2 * len(rounds) + 1}-{2 * len(rounds) + 3}: "
                     "profiling BEST, the candidate, BEST again (keep metric)")
        tiv = d.target_interval  # a clear, significant script win that GPU time then denies is suspect
        suspect = bool(tiv and tiv.mean_pct >= self.cfg.gates.noise_pct and tiv.lo_pct > 0)
        # every candidate run counts against [gates] max_rounds: the script rounds, then the profiled runs
        keep = self._keep_metric(suspect, candidate_runs=max(1, self.cfg.gates.max_rounds - len(rounds)))
        c["keep"] = keep
        if not keep.kept:
            return self._finish("tie", keep.reason, revert=True, reset=True)
        return self._improved(f"{d.reason}; {keep.reason}")

    def _measure(self, tree: str, label: str) -> Measurement:
        """One run of snapshot `tree` (the attempt's candidate or BEST) in a disposable checkout,
        verified afterwards (`_verify_run`). The [correctness] command runs once per candidate tree (its
        first run); BEST passed it at the baseline. Raises Tampered."""
        checked = self._ctx.setdefault("checked", set())
        check = "candidate" in label and tree not in checked
        checked.add(tree)
        m = measure_snapshot(self.cfg, self.ws, tree, self.store.run_dir(self._ctx["n"], label), self.env(),
                             self.cancel, self.pid_dir, check)
        self._ctx["runs"].append(m.run_dir)
        self._verify_run(m.changes, tree)
        return m

    def _verify_run(self, changes: list[FileChange], tree: str) -> None:
        """What a run of `tree` changed in its checkout: a protected file raises Tampered (named);
        a run of BEST adds its other changes to the benchmark outputs; a candidate's other changes
        become a warning."""
        is_best = tree == self._ctx.get("best_tree")
        rest = self.judge_run_changes(changes, "the run of BEST_COMMIT" if is_best else "the run")
        if rest and not is_best:
            w = (describe(rest) + " in its checkout: reported only, the tested snapshot (not the tree left "
                 "after the run) is what is judged and committed")
            if w not in self._ctx["warnings"]:
                self._ctx["warnings"].append(w)

    def _keep_metric(self, suspect: bool = True, candidate_runs: int = 1) -> KeepDecision:
        """The keep metric from adjacent profiled runs in this lease: BEST, candidate, BEST again
        (A/B/A). The candidate is compared with the mean of the two BEST runs (launch by launch
        where both have per-launch times), which cancels a drift that is linear over the three runs;
        the two BEST runs' spread joins the session's spreads and sets the floor a gain must clear
        (rules.verdict.gpu_gain_floor). When only this attempt's own spread stops a gain that clears
        the rest of the floor (BEST's level jumped during the attempt) and `candidate_runs` allows a
        second profiled candidate run, it measures candidate, BEST once more and judges the later
        triple. A failed profile, or a trace without the target kernels, is never kept (no fallback
        to a weaker metric). `candidate_runs`: profiled candidate runs allowed (>= 1)."""
        try:
            prof = self.profiler()
        except ProfilerError as e:
            prof, lost = None, str(e)
        else:
            lost = "the profiler backend is now \"none\""
        if prof is None or (prof.name == "none" and self.state.best.gpu_us is not None):
            # the baseline was judged on GPU time: the script metric alone would be a weaker keep metric
            return KeepDecision(kept=False, gpu_best_us=self.state.best.gpu_us, gpu_candidate_us=None,
                                gpu_delta_pct=None, metric_used="profiler GPU time", reason=(
                                    f"the session's keep metric is profiler GPU time, but {lost}: not kept (the keep "
                                    "decision never falls back to a weaker metric). Restore the profiler (e.g. "
                                    "cupti-python, ncu or rocprofv3 where the server runs), or start a new session "
                                    "with [profiler] backend = \"none\""))
        if prof.name == "none":
            return apply_keep_metric(None, None, [])
        g = self.cfg.gates
        best_tree, cand_tree = self._ctx["best_tree"], self._ctx["tree"]
        before = self._profile_target(prof, "best-profile", best_tree)
        if isinstance(before, KeepDecision):
            return before
        runs_left = max(1, candidate_runs)
        while True:
            cand = self._profile_target(prof, "candidate-profile", cand_tree)
            if isinstance(cand, KeepDecision):
                return cand
            after = self._profile_target(prof, "best-profile-after", best_tree)
            if isinstance(after, KeepDecision):
                return after
            if all(x[4].groups is not None for x in (before, cand, after)):
                # per launch group (kernel + grid/block), median launch: robust to time-driven
                # repetition (do_bench), warm-up launches and input-generation kernels (rules/keep.py)
                keep = judge_groups(before[4], cand[4], after[4],
                                    self.cfg.profiler.kernel or exact_names_regex(self.state.best.kernels),
                                    recent_spreads_pct=self.state.gpu_spreads_pct, min_gain_pct=g.min_gpu_gain_pct,
                                    confidence=g.confidence, suspect=suspect, classes=list(self.state.best.metrics))
                if keep.spread_pct is None:  # BEST's profiles could not be compared: nothing to learn
                    return keep
                spread = self.state.record_spread_pct(keep.spread_pct)
                floor = keep.floor
                self._ctx["class_gpu_us"] = keep.class_gpu_us
            else:
                (b1, _, calls_b, dur_b1, _), (c, names_c, calls_c, dur_c, _), (b2, _, _, dur_b2, _) = before, cand, after
                spread = self.state.record_gpu_spread(b1, b2)
                floor = gpu_gain_floor(self.state.gpu_spreads_pct, spread, g.min_gpu_gain_pct)
                best_launches = (None if dur_b1 is None or dur_b2 is None else
                                 [(x + y) / 2.0 for x, y in zip(dur_b1, dur_b2)] if len(dur_b1) == len(dur_b2)
                                 else dur_b1)
                keep = apply_keep_metric((b1 + b2) / 2.0, c, names_c, calls_b, calls_c, best_launches, dur_c,
                                         confidence=g.confidence, min_gain_pct=floor.pct, suspect=suspect)
                keep.reason += (f" (BEST profiled before and after the candidate: {b1:.1f} and {b2:.1f} us, spread "
                                f"{spread:.3f}%; {floor.shown()})")
            jumped = (not keep.kept and floor.binding == "own_spread" and keep.gpu_delta_pct is not None
                      and keep.gpu_delta_pct > floor.rest_pct)
            runs_left -= 1
            if not jumped or runs_left == 0:
                return keep
            before = after
            self._ctx["warnings"].append(
                f"BEST's GPU time moved {spread:.3f}% between its profiles around the candidate: profiled the "
                "candidate and BEST once more")

    def _profile_target(self, prof, label: str, tree: str):
        """One profiled run of snapshot `tree` in a disposable checkout, verified afterwards: (target
        GPU time us, target names, launches, per-launch us or None, the trace), or a not-kept KeepDecision
        saying why it could not be read. Raises Tampered."""
        p = profile_snapshot(self.cfg, prof, self.ws, tree, self.store.run_dir(self._ctx["n"], label), self.env(),
                             self.cancel, self.pid_dir)
        self._ctx["runs"].append(str(p.log_path.rsplit("/", 1)[0]))
        self._verify_run(p.changes, tree)
        who = "the candidate" if label.startswith("candidate") else "BEST_COMMIT"
        if p.trace is None:
            return KeepDecision(kept=False, gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None,
                                metric_used="profiler GPU time",
                                reason=f"profiling {who} failed ({p.error}): not kept, the keep decision never "
                                "falls back to a weaker metric")
        try:
            us, names = target_gpu_time(p.trace, self.cfg.profiler.kernel or exact_names_regex(self.state.best.kernels))
        except ProfilerError as e:
            return KeepDecision(kept=False, gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None,
                                metric_used="profiler GPU time", reason=f"profiling {who}: {e}: not kept")
        return us, names, target_launches(p.trace, names), target_durations(p.trace, names), p.trace

    def _incorrect(self, reason: str) -> VerdictResult:
        s, c, g = self.state, self._ctx, self.cfg.gates
        outcome, rep = after_incorrect(s.repair, c["n"], c["target"], c["hypothesis"], g.max_repairs)
        if outcome == "abandoned":
            s.repair = None
            return self._finish("abandoned", f"{reason}; still incorrect after {g.max_repairs} repair attempt(s): "
                                "abandoned (patch archived, tree reverted; not counted as a regression)",
                                revert=True, reset=True)
        s.repair = rep
        s.phase = Phase.repairing
        left = g.max_repairs - rep.repairs_used
        return self._finish("incorrect", f"{reason}; {left} repair attempt(s) left", revert=False, repairs_left=left)

    def _improved(self, reason: str) -> VerdictResult:
        s, c = self.state, self._ctx
        d, keep = c["decision"], c["keep"]
        s.pending = PendingImprovement(
            attempt=c["n"], tree=c["tree"], target=c["target"], hypothesis=c["hypothesis"],
            candidate_metrics=c["cand_values"], candidate_gpu_us=keep.gpu_candidate_us,
            candidate_class_gpu_us=c.get("class_gpu_us"),
            kernels=s.best.kernels, target_delta_pct=sum(d.target_deltas_pct) / len(d.target_deltas_pct),
            metric_used=keep.metric_used)
        s.phase = Phase.improved
        s.repair = None
        return self._finish("improved", reason, revert=False)

    def _finish(self, verdict: str, reason: str, revert: bool, reset: bool = False,
                repairs_left: int | None = None, stop: str | None = None) -> VerdictResult:
        s, c = self.state, self._ctx
        n = c["n"]
        d, keep = c.get("decision"), c.get("keep")
        moved = self.workspace_moved(c["tree"])
        if moved:  # the tested snapshot is archived; what the run left in the workspace is not kept
            verdict, revert, repairs_left, reason = "rejected", True, None, moved + (
                f" (the measurements said: {verdict}, {reason})" if verdict != "rejected" else f"; {reason}")
        patch_path = self.store.relabel(n, "pending", verdict)
        if revert:
            faults.point("save_and_test.before_revert")
            vcs.reset_to(self.ws, s.best.commit)
            faults.point("save_and_test.after_revert")
            if s.phase in (Phase.repairing, Phase.improved):
                s.phase = Phase.ready
            s.repair, s.pending = None, None
        if verdict == "regressed":
            change = sum(d.target_deltas_pct) / len(d.target_deltas_pct)
            s.regressions = s.regressions.regressed(RegressionNote(
                attempt=n, at=now_iso(), target=c["target"], hypothesis=c["hypothesis"], change_pct=change))
        elif reset:
            s.regressions = s.regressions.reset()
        s.last = LastVerdict(attempt=n, verdict=verdict, target=c["target"], reason=reason)
        # queued, not written: the verdict record, the phase and the end of the job are committed
        # together by the next save (see referee/core.py), so a kill never leaves a verdict in the
        # ledger that recovery would contradict with `interrupted`
        self.record("attempt", attempt=n, verdict=verdict, reason=reason, target=c["target"],
                    hypothesis=c["hypothesis"], changed=c["changed"], patch=str(patch_path),
                    classes=[x.model_dump() for x in d.classes] if d else [], runs=c["runs"],
                    gpu=keep.model_dump() if keep else None, reverted=revert)
        if verdict == "regressed" and should_stop(s.regressions, self.cfg.gates.max_consecutive_regressions):
            stop = f"{s.regressions.consecutive} consecutive measured regressions"
        s.in_progress = None  # the verdict and the phase are saved together with the end of the job
        if stop:  # after the revert, so the Stop Summary commit sits on top of BEST_COMMIT
            self.stop(stop)
        self.save()
        return VerdictResult(
            attempt=n, verdict=verdict, reason=reason, target=c["target"], metric=self.cfg.benchmark.metric,
            metric_used=keep.metric_used if keep else ("script metric" if d else "none"),
            classes=d.classes if d else [], target_deltas_pct=d.target_deltas_pct if d else [],
            divergent_classes=d.worse_classes if d else [], class_errors=c.get("class_errors", {}),
            gpu_best_us=keep.gpu_best_us if keep else None, gpu_candidate_us=keep.gpu_candidate_us if keep else None,
            gpu_delta_pct=keep.gpu_delta_pct if keep else None, rounds=c.get("rounds", 0), reverted=revert,
            repairs_left=repairs_left, patch_path=str(patch_path), run_dirs=c["runs"], device=self.device,
            consecutive_regressions=s.regressions.consecutive, stopped=s.phase == Phase.stopped,
            stop_reason=s.stop_reason, warnings=c["warnings"], next_actions=next_actions(s))


def _left_out_warning(paths: list[str]) -> str:
    """The warning naming new build artifacts / binary files kept out of the patch and commits."""
    shown = ", ".join(paths[:20]) + (f" and {len(paths) - 20} more" if len(paths) > 20 else "")
    return (f"left out of the archived patch (new build artifacts or binary files, never committed; a revert "
            f"deletes them): {shown}. Build them from source in the benchmark command, or add them to "
            ".gitignore")
