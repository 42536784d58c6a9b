"""The session's measured result (the tool measure_session_gain, `kopt-mcp compare`): two commits,
by default the session's baseline commit and BEST_COMMIT, measured in one paired run on one lease
under the session's rules, the way save_and_test measures a candidate against BEST:

- the script metric in paired rounds (head, base; then base, head; ...) judged by rules.script.decide
  at the session's [gates] (noise threshold, confidence, max_rounds), per config class and for the
  `global` target, each change with its paired bounds; a round under foreign load on the device is
  measured again or left out as in save_and_test (rules/load.py decide_counted);
- where a profiler exists, profiler GPU time of the target kernels from base, head, base again
  (A/B/A), judged per launch group by rules.keep.judge_groups (else rules.keep_totals.apply_keep_metric).

It changes nothing: no verdict, no counter, no noise estimate, no git state; every run happens in a
disposable checkout of the committed tree, verified afterwards. The result is logged to the ledger
(`session_gain`), from where the Stop Summary and the HTML report take their headline.

`end_session` ends the session on purpose: it measures that gain, then stops the session the way the
stop rule does (recovery.stop: the Stop Summary, headed by the measured gain, committed on the
session's branch; phase `stopped`, candidate tools refuse) with reason `ended by the agent`."""

from __future__ import annotations

import math

import git

from kopt_mcp import vcs
from kopt_mcp.errors import RefereeError, SessionError, VerdictError
from kopt_mcp.evidence.profiles import Profiles
from kopt_mcp.referee.core import STOP_MESSAGE, Progress, Session
from kopt_mcp.referee.keep_metric import profile_target
from kopt_mcp.referee.parts import Where
from kopt_mcp.referee.recovery import stop
from kopt_mcp.referee.runs import Attempt, measure_run
from kopt_mcp.referee.slots import shared_events
from kopt_mcp.results import EndSessionResult, SessionGainResult
from kopt_mcp.results_change import ClassGain
from kopt_mcp.rules.gpu_time import judge_profiles
from kopt_mcp.rules.keep_totals import KeepDecision
from kopt_mcp.rules.load import RoundLoad, can_measure_more, decide_counted
from kopt_mcp.rules.percent import ratio_shown
from kopt_mcp.rules.script import GLOBAL, Round, ScriptDecision
from kopt_mcp.session import Phase


def session_baseline(sess: Session) -> str | None:
    """The session's baseline commit (`kopt: baseline`: the first `baseline` ledger record's
    BEST_COMMIT, over every candidate slot), or None before the baseline."""
    for e in shared_events(sess):
        if e.get("event") == "baseline" and e.get("best_commit"):
            return str(e["best_commit"])
    return None


def _commit(where: Where, rev: str) -> str:
    """The full sha of commit `rev` in the workspace's repository; RefereeError when it names none."""
    try:
        return where.ws.git.rev_parse("--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except git.GitCommandError as e:
        raise RefereeError(f"{rev!r} names no commit of {where.repo_path}: pass a commit, branch or tag "
                           "(e.g. the session's branch kernel-opt/<tag>)") from e


def measure_session_gain(sess: Session, base: str | None = None, head: str | None = None,
                         progress: Progress | None = None) -> SessionGainResult:
    """Measure commit `head` (default BEST_COMMIT) against commit `base` (default the session's
    baseline commit): see the module docstring. Raises RefereeError before the baseline (without
    `base`), for a revision that names no commit, for base == head, when no device could be leased
    (the session does not stop for that), or when a run fails its correctness gate."""
    s = sess.books.state
    base_rev = base or session_baseline(sess)
    if base_rev is None:
        raise RefereeError("the session has no baseline yet: call run_benchmark first, or pass the base commit")
    base_sha, head_sha = _commit(sess.where, base_rev), _commit(sess.where, head or s.best.commit)
    if base_sha == head_sha:
        raise RefereeError(f"base and head are the same commit {base_sha[:12]}: nothing to compare (no keep yet?)")
    base_tree, head_tree = vcs.tree_of(sess.where.ws, base_sha), vcs.tree_of(sess.where.ws, head_sha)
    out = sess.jobs.lease(progress)
    if out.lease is None:
        raise RefereeError(f"no device: {out.reason}. Nothing was measured; call again later")
    # best_tree "" : neither tree is BEST's run here, so nothing a run writes joins the benchmark outputs
    a = Attempt(n=s.next_attempt, target=GLOBAL, hypothesis="session gain", tree=head_tree, best_tree="")
    prof = sess.profiler()
    policy = sess.what.policy  # the script metric alone: the full round budget at [gates] confidence
    total = 2.0 * policy.max_rounds + (3.0 if prof.name != "none" else 0.0)
    d, loaded_counted = _script_rounds(sess, a, base_tree, head_tree, policy, total, progress)
    gpu = _gpu_time(sess, a, prof, base_tree, head_tree, d, progress, total) if prof.name != "none" else None
    result = _result(sess, a, d, gpu, base_sha, head_sha, policy.confidence, loaded_counted)
    sess.books.store.log("session_gain", **result.model_dump(mode="json", exclude={"device", "classes"}),
                         classes=[c.model_dump(mode="json") for c in result.classes], device=sess.jobs.device_id)
    return result


def _script_rounds(sess: Session, a: Attempt, base_tree: str, head_tree: str, policy, total: float,
                   progress: Progress | None) -> tuple[ScriptDecision, int]:
    """Paired rounds (head then base, then base then head, ...) until the rules need no more (at most
    policy.max_rounds): rules.load.decide_counted, so a round under foreign load is measured again or
    left out as in save_and_test. Raises RefereeError when a run fails its gate."""
    rounds: list[Round] = []
    loads: list[RoundLoad] = []
    hib = sess.what.cfg.benchmark.higher_is_better
    while True:
        k = len(rounds)
        order = (("head", head_tree), ("base", base_tree)) if k % 2 == 0 else (("base", base_tree), ("head", head_tree))
        values, load = {}, {}
        for i, (side, tree) in enumerate(order):
            if progress:
                progress(2 * k + i, total, f"session gain: round {k + 1}: the {side} commit")
            m = measure_run(sess, a, tree, f"gain-{side}")
            if m.gate.kind != "ok":
                raise RefereeError(f"the run of the {side} commit failed ({m.gate.reason}); log: {m.run.log_path}")
            values[side], load[side] = m.values(), m.load
        rounds.append(Round(best=values["base"], candidate=values["head"]))
        loads.append(RoundLoad(runs=[load["base"], load["head"]]))
        can = can_measure_more(loads, policy, policy.max_rounds)
        try:
            # the noise history is the head's runs, not the base's: BEST's record check reads this measurement only
            d, lr = decide_counted(rounds, loads, GLOBAL, hib, policy, sess.books.state.noise_history, can_measure=can,
                                   record_history=[])
        except VerdictError as e:
            raise RefereeError(f"the two commits cannot be compared: {e}") from e
        if not d.needs_round or not can:
            a.rounds = len(rounds)
            return d, len(set(lr.under_load) & set(lr.counted))


def _gpu_time(sess: Session, a: Attempt, prof, base_tree: str, head_tree: str, d: ScriptDecision,
              progress: Progress | None, total: float) -> KeepDecision:
    """Profiler GPU time of the target kernels: base, head, base again (A/B/A), judged as a verdict's
    triple is (rules.gpu_time.judge_profiles). Read-only: the session's spreads are used, never extended."""
    s = sess.books.state
    runs = (("base", base_tree, "gain-base-profile"), ("head", head_tree, "gain-head-profile"),
            ("base", base_tree, "gain-base-profile-after"))
    got = []
    for i, (side, tree, label) in enumerate(runs):
        if progress:
            progress(2 * a.rounds + i, total, f"session gain: profiling the {side} commit ({i + 1} of 3)")
        x = profile_target(sess, a, prof, label, tree, who=f"the {side} commit")
        if isinstance(x, KeepDecision):
            return x
        got.append(x)
    before, cand, after = got
    # the session's judgement of a triple (rules/gpu_time.py: by harness unit, launch group or totals),
    # with its spreads read, never extended
    j = judge_profiles(Profiles(before=before, candidate=cand, after=after),
                       sess.target_regex, sess.what.policy, s.gpu_spreads_pct,
                       s.launch_counts_vary, list(s.best.metrics), False)
    return j.keep


def ratio_x(improvement_pct: float, higher_is_better: bool) -> float:
    """How many times better a change of `improvement_pct` (% + = better, rules.percent) is: for
    lower-is-better metrics base / head (+50% -> 2.0x), else head / base (+100% -> 2.0x)."""
    if higher_is_better:
        return 1.0 + improvement_pct / 100.0
    return math.inf if improvement_pct >= 100.0 else 1.0 / (1.0 - improvement_pct / 100.0)


def _loaded_text(under_load: int, counted: int) -> str:
    """The headline's rounds under foreign load: left out, or counted (a ratio measured under load is that
    load's: base and head can slow by different factors, as the MCP-client pass saw, 6.85x beside 11.97x)."""
    if not under_load:
        return ""
    if not counted:
        return f" ({under_load} under foreign load, left out)"
    return (f" ({under_load} under foreign load, counted: the ratio is that load's, and base and head can slow by "
            "different factors under it; measure again on a quieter machine before quoting it)")


def _result(sess: Session, a: Attempt, d: ScriptDecision, gpu: KeepDecision | None, base_sha: str, head_sha: str,
            confidence: float, loaded_counted: int = 0) -> SessionGainResult:
    hib, tiv = sess.what.cfg.benchmark.higher_is_better, d.target_interval
    mean = tiv.mean_pct if tiv else sum(d.target_deltas_pct) / len(d.target_deltas_pct)
    lo, hi = (tiv.lo_pct, tiv.hi_pct) if tiv else (-math.inf, math.inf)
    x = ratio_x(mean, hib)
    bounds = (f"{confidence * 100:g}% bounds {lo:+.2f}% .. {hi:+.2f}%" if math.isfinite(lo) and math.isfinite(hi)
              else "bounds unknown: noise not yet measurable")
    per_class = ", ".join(f"{c.key} {ratio_shown(c.mean_pct, c.ratio_x)}" for c in d.classes)
    gpu_text, gpu_gain = "", None
    if gpu is not None and gpu.gpu_best_us is not None and gpu.gpu_candidate_us is not None:
        gpu_gain = gpu.gpu_delta_pct
        gpu_text = (f"; profiler GPU time {gpu.gpu_best_us:.1f} -> {gpu.gpu_candidate_us:.1f} us"
                    + (f" ({-gpu_gain:+.2f}%)" if gpu_gain is not None else ""))
    loaded = _loaded_text(d.rounds_under_load, loaded_counted)
    metric, device = sess.what.cfg.benchmark.metric, sess.jobs.device.name
    headline = (f"{base_sha[:12]} -> {head_sha[:12]}: {metric} {GLOBAL} {mean:+.2f}% ({x:.2f}x; "
                f"{bounds}) over {a.rounds} paired round{'s' if a.rounds != 1 else ''}{loaded} on {device}, "
                f"{d.outcome} under the session's rules; per class {per_class}{gpu_text}")
    return SessionGainResult(
        base_commit=base_sha, head_commit=head_sha, metric=sess.what.cfg.benchmark.metric, outcome=d.outcome,
        rounds=a.rounds, target=GLOBAL, target_pct=mean, target_lo_pct=lo, target_hi_pct=hi, confidence=confidence,
        ratio_x=x, classes=[ClassGain.of(c) for c in d.classes], rounds_under_load=d.rounds_under_load,
        gpu_base_us=gpu.gpu_best_us if gpu else None, gpu_head_us=gpu.gpu_candidate_us if gpu else None,
        gpu_gain_pct=gpu_gain, gpu_note=gpu.reason if gpu else "no profiler on this device: script metric only",
        headline=headline, device=sess.jobs.device, run_dirs=list(a.runs), warnings=list(a.warnings))


#: the stop reason of a session the agent ended (end_session)
ENDED = "ended by the agent"


def end_session(sess: Session, why: str = "", progress: Progress | None = None) -> EndSessionResult:
    """End the session on purpose (module docstring): measure the session gain (none without a
    baseline or a keep; a gain that cannot be measured, e.g. no device, is named in `gain_note` and
    the session still ends), then stop with reason `ended by the agent` (`: why` appended when
    given) and commit the Stop Summary. Raises SessionError when the session stopped already, and
    RefereeError while a candidate is pending (phase improved or repairing) or the workspace holds
    untested edits (the text says what to call first), or on a workspace switched to another branch.
    Cancelled (the client cancelled the measurement) leaves the session as it was."""
    s = sess.books.state
    if s.phase == Phase.stopped:
        raise SessionError(f"the session stopped already ({s.stop_reason}) at {s.stopped_at}; the Stop Summary is "
                           f"in performance.md on {s.branch}. Start a new session (kopt-mcp serve --tag NEW) to go on")
    if s.phase in (Phase.improved, Phase.repairing):
        todo = ("commit_improvement to keep it, or revert_to_best to drop it" if s.phase == Phase.improved
                else "fix it and call save_and_test, or revert_to_best to drop it")
        n = s.pending.attempt if s.pending else s.repair.first_attempt if s.repair else "?"
        raise RefereeError(f"a candidate is pending (phase {s.phase.value}, attempt {n}): call {todo}, "
                           "then end_session")
    sess.where.check_branch()
    _, changed = vcs.diff_against(sess.where.ws, s.best.commit)
    if changed:
        shown = ", ".join(changed[:10]) + (f" and {len(changed) - 10} more" if len(changed) > 10 else "")
        raise RefereeError(f"the workspace has untested edits ({shown}): call save_and_test to judge them, or "
                           "revert_to_best to drop them (their diff is archived), then end_session")
    gain, note = _gain_or_why(sess, progress)
    reason = ENDED + (f": {' '.join(why.split())}" if why.strip() else "")
    stop(sess, reason, gain_note=note)
    sess.books.save()
    ledger = sess.books.store.ledger()
    summary = next((e.get("summary") or "" for e in reversed(ledger) if e.get("event") == "stopped"), "")
    head = sess.where.ws.head.commit
    return EndSessionResult(
        stopped=True, stop_reason=s.stop_reason or reason, best_commit=s.best.commit, branch=s.branch,
        summary_commit=head.hexsha if head.message.startswith(STOP_MESSAGE) else None, summary=summary,
        gain=gain, gain_note=note, kept=s.kept, kept_neutral=s.kept_neutral)


def _gain_or_why(sess: Session, progress: Progress | None) -> tuple[SessionGainResult | None, str]:
    """The session gain measured now (measure_session_gain), or None and why none was: no baseline,
    no keep, or the measurement's own refusal (no device, a failed run)."""
    base = session_baseline(sess)
    if base is None:
        return None, "none: no baseline was measured (run_benchmark never ran), so nothing to compare"
    if _commit(sess.where, base) == _commit(sess.where, sess.books.state.best.commit):
        return None, "none: no keep in this session (BEST_COMMIT is the baseline commit)"
    if sess.books.state.kept == 0 and sess.books.state.kept_neutral:  # issue 36 item 9: a neutral keep is never a gain
        return None, f"none: only neutral keeps ({sess.books.state.kept_neutral}), which are never a gain"
    try:
        return measure_session_gain(sess, progress=progress), ""
    except RefereeError as e:
        return None, (f"not measured ({' '.join(str(e).split())[:300]}); the tool measure_session_gain or "
                      "`kopt-mcp compare` measures it later")
