"""The commit step's re-measure (issue 34 item 1): the metric that decided the verdict, judged by the
verdict's own rule (rules/commit.py), in as few runs as the evidence needs.

- GPU time, every run profiled (CUPTI), where the verdict's bounds are tight on the very tree it judged
  (rules/commit.py verdict_stands): no run here; the out-of-process confirmation re-measures.
- GPU time, every run profiled (CUPTI), otherwise: BEST, the candidate, each profiled; the pair is judged as the
  triple (BEST, candidate, BEST) by `rules.gpu_time.judge_profiles` and `rules.verdict.profiled_verdict`
  against the session's floor; where that leaves the rule undecided, or the tree is new (formatted,
  re-applied), BEST runs once more and the A/B/A triple decides.
- GPU time through a screen (ncu, rocprofv3 as the keep metric): `keep_metric` (A/B/A), its decision.
- The script metric: one paired round (a second while undecided), judged together with the verdict's
  counted rounds by `rules.script.decide` with the verdict's policy.

A pair under foreign load is measured again in its place (rules/commit.py commit_under_load).
Sequencing only: evidence from referee/runs.py, decisions from rules/."""

from __future__ import annotations

from dataclasses import dataclass, field

from kopt_mcp.bench.measure import Profiled
from kopt_mcp.referee.confirmation import can_confirm
from kopt_mcp.referee.core import Progress, Session
from kopt_mcp.referee.keep_metric import keep_metric
from kopt_mcp.referee.profiled import rule_on_triple
from kopt_mcp.referee.runs import Attempt, measure_run, profile_run
from kopt_mcp.rules.commit import COMMIT_PAIRS, LOAD_REMEASURES, commit_decision, commit_under_load, verdict_stands
from kopt_mcp.rules.decision import Code, Decision
from kopt_mcp.rules.gpu_time import GpuTimeJudgement, keep_outcome
from kopt_mcp.rules.load import under_load
from kopt_mcp.rules.script import Round, ScriptDecision, decide

GPU = "profiler GPU time"
SCRIPT = "script metric"


@dataclass
class Remeasure:
    """What the commit's re-measure found: `decision` (rules/commit.py: commit / not_kept / wait),
    `script` (the script metric over the rounds judged, for per-class figures), `gpu` (the GPU-time
    judgement where GPU time decided), the candidate's script-metric runs at commit (class -> value:
    BEST's figures once it is committed), the load sentence of loaded runs and the benchmark runs made
    (the commit step adds the confirmation's and times the whole: results.Cost)."""

    decision: Decision
    script: ScriptDecision | None = None
    gpu: GpuTimeJudgement | None = None
    cand_runs: list[dict[str, float]] = field(default_factory=list)
    loaded: str = ""
    runs: int = 0
    #: the run folder of the candidate's last counted run at commit ([commit] include files come from it)
    cand_run_dir: str = ""

    def at_commit_pct(self) -> float:
        """The target's change at commit (%, + = better): the GPU-time gain where GPU time decided,
        else the script metric's latest round."""
        if self.gpu is not None and self.gpu.keep.gpu_delta_pct is not None:
            return self.gpu.keep.gpu_delta_pct
        return self.script.target_deltas_pct[-1] if self.script is not None and self.script.target_deltas_pct else 0.0

    def shown(self, target: str) -> str:
        """The commit message's line: what the commit re-measured and the verdict rule's figures."""
        if self.decision.code == Code.VERDICT_STANDS:
            return f"not re-measured in process at commit: {self.decision.reason}"
        per = ""
        if self.script is not None and self.script.classes:
            per = "; script metric per class " + ", ".join(f"{c.key} {c.mean_pct:+.2f}%" for c in self.script.classes)
        if self.gpu is not None and self.gpu.keep.gpu_delta_pct is not None:
            k = self.gpu.keep
            op = getattr(k, "op_delta_pct", None)
            head = (f"re-measured at commit: {self.runs} profiled run(s), profiler GPU time of the target kernels "
                    f"{k.gpu_best_us:.1f} -> {k.gpu_candidate_us:.1f} us ({k.gpu_delta_pct:+.2f}%)"
                    + (f", whole operation {op:+.2f}%" if op is not None else ""))
            return head + per
        return f"re-measured at commit: {self.runs} run(s), script metric, {target} {self.at_commit_pct():+.2f}%" + per


def remeasure(sess: Session, a: Attempt, verdict_rounds: list[Round], fresh_tree: bool, formatted: bool,
              progress: Progress | None, stand: bool = True) -> Remeasure:
    """The commit's re-measure of attempt `a` (a.tree against a.best_tree) with the metric of the
    pending verdict (`sess.books.state.pending.metric_used`). `verdict_rounds`: the verdict's counted
    script rounds; `fresh_tree`: the tree differs from the one judged (formatted or re-applied), so
    GPU time is always judged on a full A/B/A triple; `stand`: a GPU-time verdict with tight bounds may
    stand unmeasured (False: the confirmation could not stand in, so measure). Raises Tampered, RefereeError (a run of BEST
    failed: the machine changed), Cancelled."""
    p = sess.books.state.pending
    prof = sess.profiler() if p.metric_used == GPU else None
    if prof is not None and getattr(prof, "measures_script", False):
        lo = p.verdict.gpu_lo_pct if p.verdict is not None else None
        stands = verdict_stands(lo, p.gpu_floor_pct, fresh_tree, can_confirm(sess))
        if stand and stands.outcome == "commit":
            return Remeasure(decision=stands, cand_run_dir=p.candidate_run_dir)
        return _gpu_profiled(sess, a, prof, fresh_tree, formatted, progress)
    if prof is not None:
        return _gpu_keep_metric(sess, a, formatted)
    return _script(sess, a, verdict_rounds, formatted, progress)


def _gate_failed(runs: list[Profiled]) -> Decision | None:
    for p in runs:
        m = p.measurement
        if m is None or m.gate.kind != "ok":
            why = m.gate.reason if m is not None else (p.error or "the profiled run left nothing to read")
            return Decision(outcome="not_kept", code=m.gate.code if m is not None else Code.RUN_FAILED,
                            reason=f"not committed: a re-measure run failed: {why}")
    return None


def _gpu_profiled(sess: Session, a: Attempt, prof, fresh_tree: bool, formatted: bool,
                  progress: Progress | None) -> Remeasure:
    """GPU time with every run profiled: the pair, then BEST again only where needed (module docstring)."""
    out, tries, k = Remeasure(decision=Decision(outcome="wait", code=Code.UNDER_LOAD, reason="")), LOAD_REMEASURES, 0
    while True:
        k += 1
        if progress:
            progress(1, 4, f"re-measuring at commit: BEST, then the candidate, profiled (pair {k})")
        best = profile_run(sess, a, prof, a.best_tree, f"commit-best-{k}")
        cand = profile_run(sess, a, prof, a.tree, f"commit-candidate-{k}")
        out.runs += 2
        runs = [best, cand]
        bad = _gate_failed(runs)
        if bad is not None:
            out.decision = bad
            return out
        after = None
        rule, script, gpu = _judge_gpu(sess, a, best, cand, None, can_measure=not fresh_tree)
        if fresh_tree or rule.outcome in ("needs_round", "tie"):  # undecided on the pair: BEST once more
            after = profile_run(sess, a, prof, a.best_tree, f"commit-best-{k}b")
            out.runs += 1
            runs.append(after)
            bad = _gate_failed([after])
            if bad is not None:
                out.decision = bad
                return out
            rule, script, gpu = _judge_gpu(sess, a, best, cand, after, can_measure=False)
        loaded = "; ".join(r.load.shown() for r in runs if under_load(r.load, sess.what.policy))
        still = commit_under_load(commit_decision(rule, GPU, out.runs, False, formatted), bool(loaded), tries, loaded)
        out.decision, out.script, out.gpu, out.loaded = still, script, gpu, loaded
        if not loaded or still.outcome == "commit":  # a loaded pair replaced by another is not BEST's figure
            out.cand_run_dir = cand.measurement.run_dir
            out.cand_runs.append(cand.measurement.values())
        if still.outcome != "measure_again":
            if gpu is not None and after is not None and gpu.record_spread_pct is not None and not loaded:
                sess.books.state.record_spread_pct(gpu.record_spread_pct)  # a real A/A pair of BEST: the session learns
            return out
        tries -= 1


def _judge_gpu(sess: Session, a: Attempt, best: Profiled, cand: Profiled, after: Profiled | None,
               can_measure: bool) -> tuple[Decision, ScriptDecision, GpuTimeJudgement | None]:
    """The verdict's rule over the commit's profiled runs (after None: BEST's one run stands on both
    sides of the candidate, its A/A spread taken from the session's)."""
    d = decide([Round(best=best.measurement.values(), candidate=cand.measurement.values())], a.target,
               sess.what.cfg.benchmark.higher_is_better, sess.what.policy.screen(), sess.books.state.noise_history)
    j, rule = rule_on_triple(sess, d, best, cand, after or best, can_measure)
    return rule, d, j


def _gpu_keep_metric(sess: Session, a: Attempt, formatted: bool) -> Remeasure:
    """GPU time through the screen flow's keep metric (A/B/A profiled: ncu, rocprofv3)."""
    keep = keep_metric(sess, a)
    outcome = "improved" if keep.kept else keep_outcome(keep)
    if keep.code == Code.UNDER_LOAD:
        return Remeasure(decision=Decision(outcome="wait", code=Code.UNDER_LOAD, reason=(
            f"{keep.reason}. Nothing was committed and nothing is lost: the improvement stays pending; call "
            "commit_improvement again when the device is idle")), runs=3)
    rule = Decision(outcome=outcome, code=keep.code, reason=keep.reason)
    gpu = GpuTimeJudgement(keep=keep, outcome=outcome)
    return Remeasure(decision=commit_decision(rule, GPU, 3, False, formatted), gpu=gpu, runs=3)


def _script(sess: Session, a: Attempt, verdict_rounds: list[Round], formatted: bool,
            progress: Progress | None) -> Remeasure:
    """The script metric: commit pairs judged with the verdict's counted rounds, the verdict's policy."""
    out = Remeasure(decision=Decision(outcome="wait", code=Code.UNDER_LOAD, reason=""))
    tries, pairs, clean = LOAD_REMEASURES, 0, []
    while True:
        if progress:
            progress(1, 4, f"re-measuring at commit: the candidate and BEST in the same lease (pair {pairs + 1})")
        k = out.runs // 2 + 1
        cand = measure_run(sess, a, a.tree, "commit-candidate" + (f"-{k}" if k > 1 else ""))
        best = measure_run(sess, a, a.best_tree, "commit-best" + (f"-{k}" if k > 1 else ""))
        out.runs += 2
        if cand.gate.kind != "ok" or best.gate.kind != "ok":
            bad = (cand if cand.gate.kind != "ok" else best).gate
            out.decision = Decision(outcome="not_kept", code=bad.code, reason=f"not committed: re-measure failed: "
                                    f"{bad.reason}")
            return out
        loaded = "; ".join(m.load.shown() for m in (cand, best) if under_load(m.load, sess.what.policy))
        pair = Round(best=best.values(), candidate=cand.values())
        rounds = [*verdict_rounds, *clean, pair]
        s = sess.books.state  # BEST's record: its last group can be the verdict's BEST runs, in `rounds` too
        d = decide(rounds, a.target, sess.what.cfg.benchmark.higher_is_better, sess.what.policy, s.noise_history,
                   record_history=[g for g in s.best_record() if g != [r.best for r in verdict_rounds]])
        rule = Decision(outcome="needs_round" if d.needs_round else d.outcome, code=d.code, reason=(
            f"{a.target} {d.target_deltas_pct[-1]:+.2f}% at commit; over the verdict's {len(verdict_rounds)} "
            f"round(s) and {len(clean) + 1} at commit: {d.reason}"))
        still = commit_under_load(commit_decision(rule, SCRIPT, out.runs, pairs + 1 < COMMIT_PAIRS, formatted),
                                  bool(loaded), tries, loaded)
        out.decision, out.script, out.loaded = still, d, loaded
        if not loaded or still.outcome == "commit":
            out.cand_run_dir = cand.run_dir
            out.cand_runs.append(pair.candidate)
        if still.outcome != "measure_again":
            return out
        if still.code == Code.LOAD_REPEAT:
            tries -= 1
        else:
            clean.append(pair)
            pairs += 1


__all__ = ["GPU", "SCRIPT", "Remeasure", "remeasure"]

