"""save_and_test: archive the candidate and freeze it as a commit on a hidden ref
(`refs/kopt/<tag>/attempts/NNNN`), check protected paths and symlinks, measure candidate vs BEST in
the same lease (candidate, BEST; then BEST, candidate for a confirming round), each run in a
disposable checkout of its own snapshot that is verified afterwards, apply every gate and return
the verdict. Every outcome but `improved` and `incorrect` reverts (after archiving).

One attempt's working values travel in an explicit `Attempt` record (no hidden per-call state on
the session); commit_improvement's re-measure uses the same record and helpers."""

from __future__ import annotations

import math
import time

from kopt_mcp import vcs
from kopt_mcp.errors import Cancelled, DeviceLost, ProfilerError, RefereeError, StateSaveError, Tampered, VerdictError
from kopt_mcp.ledger import now_iso
from kopt_mcp.referee.confirmation import by_marked_units
from kopt_mcp.referee.core import Progress, Session
from kopt_mcp.referee.guards import protected_paths, shadowing, workspace_moved
from kopt_mcp.referee.keep_metric import keep_metric
from kopt_mcp.referee.profiled import judge_profiled
from kopt_mcp.referee.recovery import stop as stop_session
from kopt_mcp.referee.runs import Attempt, measure_run
from kopt_mcp.referee.state_guard import ensure_patch
from kopt_mcp.results import VerdictResult
from kopt_mcp.results_change import Cost
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.load import LOAD_EXTRA_ROUNDS, RoundLoad, can_measure_more, decide_counted
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.protect import touched_protected, unsafe_symlinks
from kopt_mcp.rules.repair import after_incorrect
from kopt_mcp.rules.script import GLOBAL, Round
from kopt_mcp.rules.script_only import script_only_keeps_allowed, script_only_note
from kopt_mcp.rules.stop import RegressionNote, should_stop
from kopt_mcp.rules.units import class_sums
from kopt_mcp.rules.verdict import attempt_verdict, clear_script_win
from kopt_mcp.session import PendingImprovement, Phase, TieCandidate, VerdictSummary, next_actions, require
from kopt_mcp.testing import faults


def save_and_test(sess: Session, target: str = GLOBAL, hypothesis: str = "",
                  progress: Progress | None = None, rounds: int | None = None) -> VerdictResult:
    """Test the workspace's candidate against BEST_COMMIT and rule on it (see module docstring).
    `rounds`: the most candidate runs this verdict may take, in place of [gates] max_rounds (None:
    that), within [gates] max_rounds_asked (Session.rounds_asked). Raises SessionError in a phase
    that does not allow it, RefereeError for an unknown target, rounds out of bounds or a workspace
    without changes, Cancelled when the client cancels (the tree stays as it was)."""
    with sess.rounds_asked(rounds):
        return _save_and_test(sess, target, hypothesis, progress)


def _save_and_test(sess: Session, target: str, hypothesis: str, progress: Progress | None) -> VerdictResult:
    s = sess.books.state
    require(s, "save_and_test")
    keys = list(s.best.metrics)
    if target != GLOBAL and target not in keys:
        raise RefereeError(f"target {target!r} is no config class; use 'global' or one of: {', '.join(keys)}")
    sess.where.check_branch()
    warnings = sess.moved_head_warnings()
    if sess.what.config.changed():
        warnings.append("kopt.toml changed on disk; the frozen config of session start still applies")
    snap = vcs.snapshot(sess.where.ws, s.best.commit, s.benchmark_outputs)
    patch, changed = vcs.diff_tree(sess.where.ws, s.best.commit, snap.tree)
    if snap.left_out:
        warnings.append(_left_out_warning(snap.left_out))
    if not changed:
        raise RefereeError("the workspace has no change against BEST_COMMIT: edit the kernel in "
                           f"{sess.where.workspace_path} first, then call save_and_test")
    n = s.new_attempt()
    # state first, then the patch: a crash in between leaves an attempt number that recovery
    # archives from the (untouched) tree; never a patch a later attempt could overwrite
    s.begin_job("save_and_test", attempt=n)
    sess.books.save()
    sess.books.store.archive(n, "pending", patch)
    faults.point("save_and_test.after_archive")
    frozen = vcs.freeze(sess.where.ws, snap.tree, s.best.commit, sess.where.attempt_ref(n),
                        f"kopt-mcp attempt {n}: the tested snapshot")
    a = Attempt(n=n, target=target, hypothesis=hypothesis, tree=snap.tree,
                best_tree=vcs.tree_of(sess.where.ws, s.best.commit), changed=changed, warnings=warnings)
    sess.books.store.log("snapshot", attempt=n, commit=frozen, tree=snap.tree, ref=sess.where.attempt_ref(n))
    try:
        try:
            return _judge_on_one_device(sess, a, progress)
        except Tampered as e:
            return finish(sess, a, "rejected", str(e), revert=True, code=Code.TAMPERED)
    except Cancelled:
        path = sess.books.store.relabel(n, "pending", "cancelled")  # the tree stays as it was: nothing lost
        sess.books.record("attempt", attempt=n, verdict="cancelled", code=str(Code.CANCELLED), target=target,
                          hypothesis=hypothesis, changed=changed, runs=a.runs, reverted=False, patch=str(path))
        s.end_job()
        sess.books.save()
        raise
    except StateSaveError:
        raise  # the saved job marker stays: the next call recovers the attempt
    except BaseException:
        if s.in_progress:  # an error before the verdict: the candidate stays in place
            s.end_job()
            sess.books.save()
        raise


def _judge_on_one_device(sess: Session, a: Attempt, progress: Progress | None) -> VerdictResult:
    """`_judge` on one job lease; its device lost (DeviceLost): once more from the start on a new
    lease (so every A/B pair stays on one device), lost again: verdict `failed` (reverted)."""
    for last in (False, True):
        try:
            return _judge(sess, a, progress)
        except DeviceLost as e:
            a.lost_devices.append(sess.jobs.device_id or "?")
            sess.jobs.device_lost(e, retrying=not last)
            if last:
                return finish(sess, a, "failed", f"the device was lost twice during the measurements ({e}); "
                              "the candidate was archived and reverted: call save_and_test again when the "
                              "machines are back", revert=True, reset=True, code=Code.DEVICE_LOST)
            a.measured_again()
            a.warnings.append(f"the device was lost during the measurements ({e}): measured again from the "
                              "start on another lease")
    raise AssertionError("unreachable")


def _judge(sess: Session, a: Attempt, progress: Progress | None) -> VerdictResult:
    """One verdict, phase by phase: the refusals before any run (`_refused`), the job lease, the
    paired script rounds (`_script_rounds`; every run profiled instead when the profiler measures
    the script: referee/profiled.py), then on a script win the keep metric (keep_metric.py)."""
    refused = _refused(sess, a)
    if refused is not None:
        return refused
    gate = sess.jobs.lease(progress)
    if gate.lease is None:
        stop = None if gate.reason == "cancelled" else f"no idle GPU: {gate.reason}"
        return finish(sess, a, "failed", stop or "cancelled while waiting for a GPU", revert=True, stop=stop, code=Code.NO_DEVICE)
    # a profiler that records each launch gives a second, independent paired test (the keep metric)
    try:
        prof = sess.profiler()
        screening, profiled = prof.per_launch, prof.name != "none"
    except ProfilerError:  # reported where the keep metric runs; the script test stays strict
        prof, screening, profiled = None, False, False
    if prof is not None and getattr(prof, "measures_script", False):  # every run profiled (referee/profiled.py)
        return judge_profiled(sess, a, prof, progress, finish, _incorrect, _improved)
    g = sess.what.policy
    # progress counts runs: the first pair, at most max_rounds - 1 more pairs, then 3 profiled runs
    total = 2.0 + 2.0 * (g.max_rounds - 1 + LOAD_EXTRA_ROUNDS) + (3.0 if profiled else 0.0)
    ended = _script_rounds(sess, a, progress, total, g.screen() if screening else g)
    if ended is not None:
        return ended
    if progress and profiled:
        total = 2.0 * a.rounds + 3.0  # no more script rounds: the profiled runs are the rest
        progress(2 * a.rounds, total, f"attempt {a.n}: runs {2 * a.rounds + 1}-{2 * a.rounds + 3}: "
                 "profiling BEST, the candidate, BEST again (keep metric)")
    suspect = clear_script_win(a.decision, g.noise_pct)  # a clear script win that GPU time then denies is suspect
    # every candidate run counts against [gates] max_rounds: the script rounds, then the profiled runs
    a.keep = keep_metric(sess, a, suspect, candidate_runs=max(1, g.max_rounds - a.rounds))
    v = attempt_verdict(a.decision, a.keep)
    if v.outcome != "improved":
        return finish(sess, a, v.outcome, v.reason, revert=True, reset=True, code=v.code)
    return _improved(sess, a, v.reason, v.code)


def _refused(sess: Session, a: Attempt) -> VerdictResult | None:
    """Before any run: a candidate that changes a protected path, adds an unsafe symlink or shadows
    a module the benchmark imports is `rejected` (reverted); None when it may run."""
    hits = touched_protected(a.changed, protected_paths(sess.what, sess.where))
    if hits:
        return finish(sess, a, "rejected", f"the candidate changes protected file(s) {', '.join(hits)}: the "
                      "benchmark, oracle, config and performance.md are fixed for the session; make "
                      "the change in the kernel only", revert=True, code=Code.PROTECTED_PATH)
    links = vcs.symlinks(sess.where.ws, a.tree)
    unsafe = unsafe_symlinks([p for p in a.changed if p in links], links, protected_paths(sess.what, sess.where))
    if unsafe:
        return finish(sess, a, "rejected", "; ".join(unsafe) + ": a symlink may not lead into a protected path "
                      "or out of the repository (writes through it would change what is fixed or escape "
                      "the checkout); copy the file instead", revert=True, code=Code.UNSAFE_SYMLINK)
    shadow = shadowing(sess, a.tree, a.best_tree)
    if shadow:
        return finish(sess, a, "rejected", shadow.reason, revert=True, code=shadow.code)
    return None


def _script_rounds(sess: Session, a: Attempt, progress: Progress | None, total: float,
                   policy: Policy) -> VerdictResult | None:
    """The paired script rounds on this lease: the candidate, BEST, then more pairs while the rule
    asks (rules: decide_counted under `policy`). Ends the attempt (the VerdictResult) unless the
    script says `improved`; then None, with `a.decision`, `a.rounds` and the counted runs set.
    Raises RefereeError when BEST itself failed to run."""
    if progress:
        progress(0, total, f"attempt {a.n}: run 1: the candidate")
    cand = measure_run(sess, a, a.tree, "candidate")
    faults.point("save_and_test.after_candidate_run")
    if cand.gate.kind == "failed":
        return finish(sess, a, "failed", cand.gate.reason, revert=True, reset=True, code=cand.gate.code)
    if cand.gate.kind == "incorrect":
        if cand.table is not None:  # per-class error numbers for the agent's repair
            a.class_errors = cand.table.failing_errors()
            summary = cand.table.failing_summary()
            return _incorrect(sess, a, f"{cand.gate.reason}" + (f" ({summary})" if summary else ""), cand.gate.code)
        return _incorrect(sess, a, cand.gate.reason, cand.gate.code)
    if progress:
        progress(1, total, f"attempt {a.n}: run 2: BEST_COMMIT in the same lease")
    best = measure_run(sess, a, a.best_tree, "best")
    faults.point("save_and_test.after_best_run")
    if best.gate.kind != "ok":
        raise RefereeError(f"BEST_COMMIT itself failed to run just now ({best.gate.reason}): the machine "
                           "changed, not the candidate. The candidate is still in place; call save_and_test again")
    rounds = [Round(best=best.values(), candidate=cand.values())]
    loads = [RoundLoad(runs=[best.load, cand.load])]  # the foreign load each run ran under (rules/load.py)
    s, hib = sess.books.state, sess.what.cfg.benchmark.higher_is_better
    try:
        d, a.load = decide_counted(rounds, loads, a.target, hib, policy, s.noise_history,
                                   can_measure=can_measure_more(loads, policy, policy.script_rounds),
                                   record_history=s.best_record())
        while d.needs_round:
            if progress:
                progress(2 * len(rounds), total, f"attempt {a.n}: runs {2 * len(rounds) + 1}-"
                         f"{2 * len(rounds) + 2}: paired round {len(rounds) + 1} of at most {policy.max_rounds} "
                         f"({d.reason})")
            b2 = measure_run(sess, a, a.best_tree, "best")
            c2 = measure_run(sess, a, a.tree, "candidate")
            if b2.gate.kind != "ok" or c2.gate.kind != "ok":
                bad = c2 if c2.gate.kind != "ok" else b2
                return finish(sess, a, "failed", f"the confirming run failed: {bad.gate.reason}", revert=True,
                              reset=True, code=bad.gate.code)
            rounds.append(Round(best=b2.values(), candidate=c2.values()))
            loads.append(RoundLoad(runs=[b2.load, c2.load]))
            d, a.load = decide_counted(rounds, loads, a.target, hib, policy, s.noise_history,
                                       can_measure=can_measure_more(loads, policy, policy.script_rounds),
                                       record_history=s.best_record())
    except VerdictError as e:
        return finish(sess, a, "failed", str(e), revert=True, reset=True, code=Code.BAD_TARGET)
    counted = [rounds[i] for i in a.load.counted] or rounds  # runs under foreign load are not the noise of now
    s.record_best_runs([r.best for r in counted])  # BEST ran len(rounds) times in this lease
    a.decision, a.rounds, a.cand_run_values = d, len(rounds), [r.candidate for r in counted]
    a.counted_rounds = counted
    if d.outcome != "improved":
        return finish(sess, a, d.outcome, d.reason, revert=True, reset=d.outcome != "regressed", code=d.code)
    return None


def _incorrect(sess: Session, a: Attempt, reason: str, code: Code) -> VerdictResult:
    """The correctness gate failed (`code`: rows_incorrect or check_failed): `incorrect`, the
    candidate left in place for repair, or `abandoned` (code abandoned) after the last repair."""
    s, g = sess.books.state, sess.what.policy
    outcome, rep = after_incorrect(s.repair, a.n, a.target, a.hypothesis, g.max_repairs)
    if outcome == "abandoned":
        return finish(sess, a, "abandoned", f"{reason}; still incorrect after {g.max_repairs} repair attempt(s): "
                      "abandoned (patch archived, tree reverted; not counted as a regression)",
                      revert=True, reset=True, code=Code.ABANDONED)
    s.repairing(rep)
    left = g.max_repairs - rep.repairs_used
    return finish(sess, a, "incorrect", f"{reason}; {left} repair attempt(s) left", revert=False, repairs_left=left,
                  code=code)


def _class_gains(keep) -> dict[str, dict[str, float]]:
    """VerdictSummary's classes_gpu_pct / classes_op_pct from a keep judged by harness unit (its `units`);
    empty where another metric decided."""
    sums = class_sums(getattr(keep, "units", None) or [])
    return {"classes_gpu_pct": {c.cls: c.gain_pct for c in sums if c.gain_pct is not None},
            "classes_op_pct": {c.cls: c.op_gain_pct for c in sums if c.op_gain_pct is not None}}


def _improved(sess: Session, a: Attempt, reason: str, code: Code) -> VerdictResult:
    d, keep = a.decision, a.keep
    tiv = d.keep_interval or d.target_interval  # the bound the reason showed: the keep's own where it decided
    summary = VerdictSummary(
        rounds=a.rounds, target_pct=tiv.mean_pct if tiv else sum(d.target_deltas_pct) / len(d.target_deltas_pct),
        target_lo_pct=tiv.lo_pct if tiv and math.isfinite(tiv.lo_pct) else None,
        confidence=tiv.overall_confidence if tiv else None,
        classes_pct={c.key: c.mean_pct for c in d.classes}, gpu_best_us=keep.gpu_best_us,
        gpu_candidate_us=keep.gpu_candidate_us, gpu_gain_pct=keep.gpu_delta_pct, gpu_lo_pct=keep.lower_bound_pct,
        op_gain_pct=getattr(keep, "op_delta_pct", None), **_class_gains(keep))
    vendor = sess.jobs.device.vendor if sess.jobs.device else "cpu"
    script_only = keep.metric_used == "script metric"  # no profiler measured it (rules/script_only.py)
    if script_only:
        cfg = sess.what.cfg
        allowed = script_only_keeps_allowed(cfg.gates.allow_script_only_keeps, vendor, cfg.profiler.backend)
        reason = f"{reason}; {script_only_note(allowed)}"
    sess.books.state.improved(PendingImprovement(
        attempt=a.n, tree=a.tree, target=a.target, hypothesis=a.hypothesis,
        candidate_metrics=a.cand_values, candidate_gpu_us=keep.gpu_candidate_us,
        candidate_class_gpu_us=a.class_gpu_us, candidate_class_op_us=a.class_op_us, candidate_op_us=a.op_us,
        kernels=sess.books.state.best.kernels, target_delta_pct=sum(d.target_deltas_pct) / len(d.target_deltas_pct),
        metric_used=keep.metric_used, base=sess.books.state.best.commit,
        gpu_best_us=keep.gpu_best_us, gpu_floor_pct=a.gpu_floor_pct, gpu_by_unit=by_marked_units(keep),
        candidate_run_metrics=a.cand_run_values, candidate_run_dir=a.cand_run_dir,
        verdict=summary, script_only=script_only, vendor=vendor, verdict_rounds=list(a.counted_rounds)))
    return finish(sess, a, "improved", reason, revert=False, code=code)


def finish(sess: Session, a: Attempt, verdict: str, reason: str, revert: bool, reset: bool = False,
           repairs_left: int | None = None, stop: str | None = None, *, code: Code) -> VerdictResult:
    """Rule `verdict` on attempt `a` (`code`: its stable reason code): relabel its patch, revert
    (after archiving) when `revert`,
    move the counters (`reset`: a verdict that resets the regression counter), queue the `attempt`
    record, stop the session when the stop rule says so (or `stop` names a reason), and save:
    the commit point of the attempt. A workspace changed during the runs turns any verdict into
    `rejected`."""
    s, d, keep, n = sess.books.state, a.decision, a.keep, a.n
    moved = workspace_moved(sess, a.tree)
    if moved:  # the tested snapshot is archived; what the run left in the workspace is not kept
        verdict, revert, repairs_left, code, reason = "rejected", True, None, Code.TAMPERED, moved + (
            f" (the measurements said: {verdict}, {reason})" if verdict != "rejected" else f"; {reason}")
    store = sess.books.store
    patch_path = ensure_patch(store, sess.where.ws, sess.where.ref_prefix, n, store.relabel(n, "pending", verdict))
    if revert:
        faults.point("save_and_test.before_revert")
        vcs.reset_to(sess.where.ws, s.best.commit)
        faults.point("save_and_test.after_revert")
        s.dropped_candidate()
    if verdict == "regressed":
        tiv = d.target_interval  # the mean the reason showed (the geometric mean ratio's change)
        change = tiv.mean_pct if tiv is not None else sum(d.target_deltas_pct) / len(d.target_deltas_pct)
        s.regressed(RegressionNote(attempt=n, at=now_iso(), target=a.target, hypothesis=a.hypothesis,
                                   change_pct=change))
    elif reset:
        s.reset_regressions()
    s.ruled(n, verdict, a.target, reason, tie=_tie(sess, a) if verdict == "tie" and d else None)
    cost = Cost.of(len(a.runs), time.monotonic() - a.t0, s.plain_run_s,  # issue 34 item 6
                   test_s=a.correctness.wall_s if a.correctness else 0.0)
    # queued, not written: the verdict record, the phase and the end of the job are committed
    # together by the next save (see referee/core.py), so a kill never leaves a verdict in the
    # ledger that recovery would contradict with `interrupted`
    sess.books.record("attempt", attempt=n, verdict=verdict, code=str(code), reason=reason, target=a.target,
                      hypothesis=a.hypothesis, changed=a.changed, patch=str(patch_path),
                      classes=[x.model_dump() for x in d.classes] if d else [], runs=a.runs,
                      gpu=keep.model_dump() if keep else None, reverted=revert, device=sess.jobs.device_id,
                      **({"provenance": a.provenance} if a.provenance else {}),
                      **({"rounds_under_load": len(a.load.under_load), "load": a.load.model_dump(mode="json")}
                         if a.load is not None else {}),
                **({"lost_devices": a.lost_devices} if a.lost_devices else {}), cost=cost.model_dump(),
                **({"correctness": a.correctness.model_dump(mode="json")} if a.correctness else {}))
    if verdict == "regressed" and should_stop(s.regressions, sess.what.policy.max_consecutive_regressions):
        stop = f"{s.regressions.consecutive} consecutive measured regressions"
    s.end_job()  # the verdict and the phase are saved together with the end of the job
    if stop:  # after the revert, so the Stop Summary commit sits on top of BEST_COMMIT
        stop_session(sess, stop)
    sess.books.save()
    return VerdictResult(
        attempt=n, verdict=verdict, code=code, reason=reason, target=a.target, metric=sess.what.cfg.benchmark.metric,
        metric_used=keep.metric_used if keep else ("script metric" if d else "none"),
        classes=d.classes if d else [], target_deltas_pct=d.target_deltas_pct if d else [],
        target_interval=(d.shown_interval or d.target_interval) if d else None,
        divergent_classes=d.worse_classes if d else [], record=d.record if d else None, class_errors=a.class_errors,
        gpu_best_us=keep.gpu_best_us if keep else None, gpu_candidate_us=keep.gpu_candidate_us if keep else None,
        gpu_delta_pct=keep.gpu_delta_pct if keep else None, gpu_floor_pct=a.gpu_floor_pct, rounds=a.rounds, reverted=revert,
        rounds_under_load=len(a.load.under_load) if a.load is not None else 0,
        repairs_left=repairs_left, patch_path=str(patch_path), run_dirs=a.runs, device=sess.jobs.device,
        consecutive_regressions=s.regressions.consecutive, stopped=s.phase == Phase.stopped,
        stop_reason=s.stop_reason, warnings=a.warnings, next_actions=next_actions(s), cost=cost,
        correctness=a.correctness)


def _tie(sess: Session, a: Attempt) -> TieCandidate:
    """A `tie`'s candidate as commit_improvement(neutral_reason=...) may keep it (session.TieCandidate)."""
    d = a.decision
    iv = d.shown_interval or d.target_interval
    return TieCandidate(attempt=a.n, tree=a.tree, base=sess.books.state.best.commit, target=a.target,
                        hypothesis=a.hypothesis, classes=[c.model_dump() for c in d.classes],
                        target_pct=iv.mean_pct if iv is not None else None,
                        candidate_run_metrics=[dict(v) for v in a.cand_run_values])


def _left_out_warning(paths: list[str]) -> str:
    """The warning naming new build artifacts / binary files kept out of the patch and commits."""
    shown = ", ".join(paths[:20]) + (f" and {len(paths) - 20} more" if len(paths) > 20 else "")
    return (f"left out of the archived patch (new build artifacts or binary files, never committed; a revert "
            f"deletes them): {shown}. Build them from source in the benchmark command, or add them to "
            ".gitignore")
