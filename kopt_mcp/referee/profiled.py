"""save_and_test where every run is profiled (a profiler that runs inside the benchmark's process at
small cost and records each launch: CUPTI): BEST, the candidate, BEST again (A/B/A), the script
metric read from the same runs; then one more candidate run and BEST run only while undecided,
within `[gates] max_rounds` candidate runs. A clear verdict takes three benchmark runs and one
correctness run (issue 24).

Sequencing only: the evidence comes from `runs.profile_run` (bench/), the decision from
`rules.verdict.profiled_verdict` over `rules.script.decide` (the screen) and
`rules.gpu_time.judge_profiles` (GPU time by harness unit, else launch group, else totals).
"""

from __future__ import annotations

from kopt_mcp.bench.measure import Profiled
from kopt_mcp.errors import ProfilerError, RefereeError, VerdictError
from kopt_mcp.evidence.profiles import Profiles, TargetProfile
from kopt_mcp.evidence.trace import target_durations, target_gpu_time, target_launches
from kopt_mcp.referee.confirmation import by_marked_units, confirm_out_of_process
from kopt_mcp.referee.core import Progress, Session
from kopt_mcp.referee.runs import Attempt, profile_run
from kopt_mcp.results import VerdictResult
from kopt_mcp.rules.decision import Code, Decision
from kopt_mcp.rules.gpu_time import GpuTimeJudgement, judge_profiles
from kopt_mcp.rules.load import LOAD_EXTRA_ROUNDS, RoundLoad, can_measure_more, decide_counted
from kopt_mcp.rules.provenance import fingerprint, unchanged
from kopt_mcp.rules.script import Round, ScriptDecision
from kopt_mcp.rules.verdict import clear_script_win, profiled_verdict


class _Stop(Exception):
    """A run ended the attempt early: `result` is its verdict."""

    def __init__(self, result: VerdictResult) -> None:
        super().__init__("attempt ended")
        self.result = result


def judge_profiled(sess: Session, a: Attempt, prof, progress: Progress | None, finish, incorrect,
                   improved) -> VerdictResult:
    """Measure and rule on attempt `a` with every run profiled under `prof` (module docstring).
    `finish(sess, a, verdict, reason, revert, reset=..., code=...)`, `incorrect(sess, a, reason, code)`
    and `improved(sess, a, reason, code)` are save_and_test's (referee/attempt.py). Raises
    Tampered, Cancelled, DeviceLost and RefereeError (BEST itself failed to run)."""
    policy = sess.what.policy
    total = 1.0 + 2.0 * (policy.max_rounds + LOAD_EXTRA_ROUNDS)

    def step(k: int, what: str) -> None:
        if progress:
            progress(k, total, f"attempt {a.n}: run {k + 1}: {what}")

    try:
        step(0, "BEST_COMMIT, profiled")
        best = [_best_run(sess, a, prof, 1)]
        step(1, "the candidate, profiled (and its correctness command)")
        cands = [_candidate_run(sess, a, prof, 1, finish, incorrect)]
        step(2, "BEST_COMMIT again, profiled")
        best.append(_best_run(sess, a, prof, 2))
        while True:
            d, j, v = _judge(sess, a, best, cands)
            if v.outcome != "needs_round":
                break
            n = len(cands) + 1
            step(2 * n - 1, f"the candidate again ({v.reason[:120]})")
            cands.append(_candidate_run(sess, a, prof, n, finish, incorrect))
            step(2 * n, "BEST_COMMIT again")
            best.append(_best_run(sess, a, prof, n + 1))
    except _Stop as stop:
        return stop.result
    except VerdictError as e:
        return finish(sess, a, "failed", str(e), revert=True, reset=True, code=Code.BAD_TARGET)
    return _apply(sess, a, best, cands, d, j, v, finish, improved)


def _best_run(sess: Session, a: Attempt, prof, k: int) -> Profiled:
    p = profile_run(sess, a, prof, a.best_tree, f"best-{k}")
    if p.measurement is None or p.measurement.gate.kind != "ok":
        why = p.measurement.gate.reason if p.measurement is not None else p.error
        raise RefereeError(f"BEST_COMMIT itself failed to run just now ({why}): the machine changed, not the "
                           "candidate. The candidate is still in place; call save_and_test again")
    return p


def _candidate_run(sess: Session, a: Attempt, prof, k: int, finish, incorrect) -> Profiled:
    p = profile_run(sess, a, prof, a.tree, f"candidate-{k}", check=True)
    m = p.measurement
    if m is None:
        raise _Stop(finish(sess, a, "failed", p.error or "the profiled run left nothing to read", revert=True,
                           reset=True, code=Code.RUN_FAILED))
    if m.gate.kind == "failed":
        raise _Stop(finish(sess, a, "failed", m.gate.reason, revert=True, reset=True, code=m.gate.code))
    if m.gate.kind == "incorrect":
        if m.table is not None:  # per-class error numbers for the agent's repair
            a.class_errors = m.table.failing_errors()
            summary = m.table.failing_summary()
            raise _Stop(incorrect(sess, a, m.gate.reason + (f" ({summary})" if summary else ""), m.gate.code))
        raise _Stop(incorrect(sess, a, m.gate.reason, m.gate.code))
    return p


def target_evidence(sess: Session, p: Profiled) -> TargetProfile | str:
    """The run's target-kernel evidence (evidence/profiles.py TargetProfile), or why there is none (text)."""
    if p.trace is None:
        return f"profiling failed ({p.error})"
    try:
        us, names = target_gpu_time(p.trace, sess.target_regex)
    except ProfilerError as e:
        return str(e)
    return TargetProfile(trace=p.trace, us=us, names=names, launches=target_launches(p.trace, names),
                         durations_us=target_durations(p.trace, names), clock=p.clock)


def _judge(sess: Session, a: Attempt, best: list[Profiled], cands: list[Profiled]
           ) -> tuple[ScriptDecision, GpuTimeJudgement | None, Decision]:
    """The screen over every round that counts (round i: the BEST run before candidate run i, the BEST
    run after it; rounds under foreign load left out or measured again: rules/load.py), the GPU time of
    the latest A/B/A triple that counts, and the verdict rule. Raises VerdictError."""
    s, policy = sess.books.state, sess.what.policy
    rounds = [Round(best=b.measurement.values(), candidate=c.measurement.values()) for b, c in zip(best, cands)]
    loads = [RoundLoad(runs=[best[i].load, cands[i].load, best[i + 1].load]) for i in range(len(cands))]
    can = can_measure_more(loads, policy.screen(), policy.max_rounds)  # loaded rounds replaced within a bound
    d, a.load = decide_counted(rounds, loads, a.target, sess.what.cfg.benchmark.higher_is_better, policy.screen(),
                               s.noise_history, can_measure=can)
    if a.load.repeat or not a.load.counted:
        return d, None, Decision(outcome="needs_round" if a.load.repeat else "tie", code=d.code, reason=d.reason)
    k = a.load.counted[-1]
    j, v = rule_on_triple(sess, d, best[k], cands[k], best[k + 1], can)
    if j is None:
        return d, None, v
    return d, j, v.model_copy(update={"reason": f"{v.reason}; {a.load.reason}"}) if a.load.reason else v


def rule_on_triple(sess: Session, d: ScriptDecision, before: Profiled, cand: Profiled, after: Profiled,
                   can_measure: bool) -> tuple[GpuTimeJudgement | None, Decision]:
    """The verdict rule over one A/B/A triple of profiled runs (`before` may be `after`: the commit's
    pair, BEST's A/A spread then taken from the session's): the GPU-time judgement
    (`rules.gpu_time.judge_profiles`) and `rules.verdict.profiled_verdict` with the screen `d`; where a
    run's trace lacks the target kernels, (None, a tie with code gpu_time_missing). Used by save_and_test
    and by the commit's re-measure (referee/commit_measure.py), so both judge by one rule."""
    s, policy = sess.books.state, sess.what.policy
    triple = [target_evidence(sess, p) for p in (before, cand, after)]
    missing = next((x for x in triple if isinstance(x, str)), None)
    if missing is not None:
        return None, Decision(outcome="tie", code=Code.GPU_TIME_MISSING, reason=(
            f"{missing}: not kept, the keep decision never falls back to a weaker metric"))
    j = judge_profiles(Profiles(before=triple[0], candidate=triple[1], after=triple[2]),
                       sess.target_regex, policy, s.gpu_spreads_pct,
                       s.launch_counts_vary, list(s.best.metrics), clear_script_win(d, policy.noise_pct))
    return j, profiled_verdict(d, j, policy, can_measure=can_measure)


def _apply(sess: Session, a: Attempt, best: list[Profiled], cands: list[Profiled], d: ScriptDecision,
           j: GpuTimeJudgement | None, v: Decision, finish, improved) -> VerdictResult:
    """Remember what the session learns (BEST's runs, spreads), then rule."""
    s = sess.books.state
    clean = set(a.load.counted) if a.load is not None and a.load.counted else set(range(len(cands)))
    # BEST ran len(best) times in this lease; runs under foreign load are not the noise of now
    s.record_best_runs([b.measurement.values() for i, b in enumerate(best) if i in clean or i - 1 in clean])
    a.decision, a.rounds = d, len(cands)
    a.cand_run_values = [c.measurement.values() for i, c in enumerate(cands) if i in clean]
    a.cand_run_dir = next((c.measurement.run_dir for i, c in reversed(list(enumerate(cands))) if i in clean), "")
    a.counted_rounds = [Round(best=best[i].measurement.values(), candidate=c.measurement.values())
                        for i, c in enumerate(cands) if i in clean]
    if j is not None:
        a.keep = j.keep
        s.launch_counts_vary = s.launch_counts_vary or j.time_driven
        if j.record_spread_pct is not None:
            s.record_spread_pct(j.record_spread_pct)
        a.gpu_floor_pct = j.floor.pct if j.floor is not None else None
        if j.class_gpu_us is not None:
            a.class_gpu_us = j.class_gpu_us
        a.class_op_us, a.op_us = j.class_op_us, j.op_us
        _record_provenance(sess, a, best[-1], cands[-1])
    if v.outcome == "improved" and j is not None:
        v = _provenance(sess, a, j, v)
    if v.outcome != "improved":
        return finish(sess, a, v.outcome, v.reason, revert=True, reset=v.outcome != "regressed", code=v.code)
    return improved(sess, a, v.reason, v.code)


def _record_provenance(sess: Session, a: Attempt, best: Profiled, cand: Profiled) -> None:
    """Every measured verdict records what the target kernels ran as, BEST's and the candidate's
    (rules/provenance.py fingerprint: compiled code hashes and launch configurations), in the
    ledger's attempt record; `unchanged` says whether both match."""
    if best.trace is None or cand.trace is None:
        return
    regex = sess.target_regex or "."
    fb, fc = fingerprint(best.trace, regex), fingerprint(cand.trace, regex)
    a.provenance = {"best": fb.model_dump() if fb else None, "candidate": fc.model_dump() if fc else None,
                    "unchanged": unchanged(fb, fc)}


def _provenance(sess: Session, a: Attempt, j: GpuTimeJudgement, v: Decision) -> Decision:
    """A GPU-time win whose target kernels compiled and launched exactly as BEST's (`a.provenance`,
    recorded by `_record_provenance`) is kept only when the out-of-process confirmation measures the
    gain too (rules/provenance.py)."""
    if not (a.provenance or {}).get("unchanged"):
        return v
    conf = confirm_out_of_process(sess, a, (j.keep.gpu_best_us, j.keep.gpu_candidate_us, a.gpu_floor_pct),
                                  by_marked_units(j.keep))
    why = ("the target kernels compiled byte-identically and launched with the same configurations as BEST's "
           "(a change of arguments or data layout can still be a real win)")
    if conf is not None and conf.status == "confirmed":
        return Decision(outcome="improved", code=v.code, reason=f"{v.reason}; {why}: {conf.reason}")
    said = conf.reason if conf is not None else "no out-of-process measurement was possible"
    return Decision(outcome="tie", code=Code.COMPILED_CODE_UNCHANGED, reason=(
        f"GPU time says faster, but {why}, and the out-of-process confirmation did not measure the gain ({said}): "
        f"not kept. {v.reason}"))


__all__ = ["judge_profiled", "rule_on_triple", "target_evidence"]
