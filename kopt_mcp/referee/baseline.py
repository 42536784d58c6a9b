"""The baseline: `baseline_runs` runs and (with a profiler) BASELINE_PROFILES profiled runs of
unmodified BEST_COMMIT; their median is BEST's metric, the profiles' spreads the first noise
estimate of GPU time. The first plain runs may be `kopt-mcp init`'s runs of the same tree, command,
config and interpreter (referee/baseline_adopt.py; the result's `reason` says whether and why). Under
a profiler whose runs are also script-metric runs (`measures_script`: CUPTI; every run of a verdict
is then profiled, referee/profiled.py) the profiled runs' results stand for the plain runs still
due, so the baseline runs BASELINE_PROFILES runs, not `baseline_runs` + BASELINE_PROFILES; and
init's trace of its run under that profiler, where adopted, stands for the first profile, so it runs
BASELINE_PROFILES - 1.
Recorded in the ledger, rendered into performance.md and committed (`kopt: baseline`); BEST_COMMIT
moves to that commit and the phase to ready."""

from __future__ import annotations

import statistics

from kopt_mcp import vcs
from kopt_mcp.bench.measure import Measurement
from kopt_mcp.errors import ProfilerError, RefereeError
from kopt_mcp.evidence.segment import trace_units
from kopt_mcp.evidence.trace import exact_names_regex, target_gpu_time
from kopt_mcp.referee.baseline_adopt import Adoption, adopt_init_runs
from kopt_mcp.referee.core import BASELINE_MESSAGE, Progress, Session
from kopt_mcp.referee.gpu_target import gpu_target, hottest_note
from kopt_mcp.referee.guards import judge_run_changes, protected_paths
from kopt_mcp.referee.parts import What
from kopt_mcp.referee.report import perf_rows
from kopt_mcp.referee.slots import best_lock, publish
from kopt_mcp.results import BenchmarkResult, ClassMetric
from kopt_mcp.results_change import ClassDetectable, Detectable, RoundsFor
from kopt_mcp.rules.clocks import same_clock
from kopt_mcp.rules.detectable import POWER, detectable, rounds_for
from kopt_mcp.rules.keep import class_gpu_times, group_spread_pct, launch_counts_differ, target_median_us
from kopt_mcp.rules.percent import improvement_pct, spread_pct
from kopt_mcp.rules.protect import FileChange, describe, touched_protected
from kopt_mcp.rules.script import GLOBAL, target_value
from kopt_mcp.rules.stats import noise_from_groups
from kopt_mcp.rules.units import unit_gpu_times, unit_spread_pct
from kopt_mcp.session import next_actions
from kopt_mcp.testing import faults

#: profiled runs of unmodified BEST_COMMIT at the baseline, back to back: their spreads are the
#: first estimate of the process-to-process shift of GPU time (rules.floor.gpu_gain_floor)
BASELINE_PROFILES = 4


def baseline(sess: Session, progress: Progress | None) -> BenchmarkResult:
    """Measure and record the baseline (module docstring); the device is leased by the caller.
    Raises RefereeError when the unmodified benchmark fails its gate or writes a protected file,
    or when profiling it fails (the text says what to fix)."""
    cfg = sess.what.cfg
    runs = cfg.gates.baseline_runs
    prof = sess.profiler()
    best_tree = vcs.tree_of(sess.where.ws, sess.books.state.best.commit)
    adoption = adopt_init_runs(sess, best_tree, runs, prof)
    init_traces = _init_traces(prof, adoption) if prof.name != "none" else []
    profiles_due = BASELINE_PROFILES - len(init_traces) if prof.name != "none" else 0
    steps = runs + profiles_due  # the progress total
    # the profiled runs that also stand for plain runs (module docstring), in order
    stand_in = min(profiles_due, runs - len(adoption.runs)) if getattr(prof, "measures_script", False) else 0
    steps -= stand_in
    group, m, walls = _plain_runs(sess, progress, steps, best_tree, adoption, runs - stand_in)
    check_due = not adoption.tests and len(group) == len(adoption.runs)  # no plain run measured here
    note = "no profiler: the script metric is the keep metric"
    class_gpu_us: dict[str, float] | None = None
    profiles, traces, clocks, kernels, stood = _profiles(sess, prof, best_tree, progress, (runs - stand_in, steps),
                                                         (profiles_due, init_traces), stand_in, check_due)
    own = len(init_traces)  # BEST's GPU time is read from the baseline's own first profile, on its lease
    gpu_us = profiles[own] if profiles else None
    for mi in stood:
        m = m or mi  # the first run is the one shown in the result
        group.append(mi.values())
        walls.append(mi.run.duration_s)
    baseline_values = {k: statistics.median(g[k] for g in group) for k in group[0]}
    sess.books.state.plain_run_s = statistics.median(walls)  # the unit of every cost (results.Cost)
    regex = cfg.profiler.kernel or exact_names_regex(kernels)
    spreads = _baseline_spreads(traces, profiles, regex, clocks)
    counts_vary = any(launch_counts_differ(a, b, regex) for a, b in zip(traces, traces[1:]))
    units = trace_units(traces[own]) if traces else None
    if units and regex:  # the keep metric's quantity: GPU time per invocation, per harness unit
        gpu_us, class_gpu_us = unit_gpu_times(units, regex, list(baseline_values))
    elif traces and traces[own].groups is not None:  # the median launch per launch group
        gpu_us = target_median_us(traces[own], regex)[0]
        class_gpu_us = class_gpu_times(traces[own], list(baseline_values), regex)
    if profiles:
        note = f"keep metric: profiler GPU time of {', '.join(k[:60] for k in kernels)}"
    s = sess.books.state
    s.begin_job("baseline", base=s.best.commit)
    sess.books.save()  # the marker first: a kill below leaves something recovery can undo
    s.baseline_recorded(baseline_values, gpu_us, kernels)
    s.record_best_runs(group)
    for spread in spreads:
        s.record_spread_pct(spread)
    s.launch_counts_vary = counts_vary
    rows = [r.model_dump() for r in perf_rows(
        "baseline", s.best.commit, cfg.benchmark.command, "global", kernels, s.best.metrics,
        gpu_us, None, f"unmodified BEST_COMMIT on {sess.jobs.device.name}; {note}", class_gpu_us=class_gpu_us)]
    # queued with its performance.md rows; performance.md is rendered from the ledger
    rec = sess.books.record("baseline", best_commit=s.best.commit, metrics=s.best.metrics, runs=group, gpu_us=gpu_us,
                            kernels=kernels, gpu_profiles_us=profiles, device=sess.jobs.device.model_dump(),
                            device_id=sess.jobs.device_id, run_dir=m.run_dir, rows=rows,
                            adopted_runs=len(adoption.runs), adopted_tests=adoption.tests, adoption_code=adoption.code,
                            profiled_runs=stand_in, adopted_profiles=len(init_traces))
    sess.write_performance()
    faults.point("baseline.after_perf_written")
    commit = rec["best_commit"] = vcs.commit_paths(sess.where.ws, ["performance.md"], BASELINE_MESSAGE)
    s.best.commit = commit  # recovery compares the workspace's HEAD with the marker's base
    faults.point("baseline.after_git_commit")
    vcs.ensure_best_worktree(sess.where.repo, sess.where.best_path, commit)
    faults.point("baseline.after_best_worktree")
    s.baseline_committed(commit)
    with best_lock(sess):
        publish(sess)  # the session's BEST, for every candidate slot
    sess.books.save()  # the commit point: the baseline record is committed with the phase
    res = bench_result(sess, "baseline (BEST_COMMIT)", m, recorded=True, runs=group)
    said = (f"{stand_in} of the {runs} baseline run(s) read from the {prof.name} profiled runs (their results are "
            "script-metric runs, as in every verdict under this profiler)") if stand_in else ""
    traced = (f"init's {prof.name} trace stands for {len(init_traces)} of the {BASELINE_PROFILES} profiled runs"
              if init_traces else "")
    first = traces[own] if traces else None  # BEST's sources: the BEST worktree, at the baseline's commit
    target = gpu_target(cfg.profiler.kernel, kernels, first, sess.where.best_path)
    hottest = hottest_note(target, first)
    return res.model_copy(update={"reason": "; ".join(x for x in (res.reason, adoption.reason, said, traced, hottest)
                                                      if x), "gpu_target": target})


def _init_traces(prof, adoption: Adoption) -> list:
    """The traces of init's adopted runs made under the session's profiler (Adoption.traces), parsed
    by it: they stand for the first of the baseline's profiled runs (at most BASELINE_PROFILES - 1:
    the baseline profiles at least once itself). A trace the profiler cannot read is left out."""
    out = []
    for d in adoption.traces[:BASELINE_PROFILES - 1]:
        try:
            out.append(prof.parse(d))
        except ProfilerError:
            continue
    return out


def _profiles(sess: Session, prof, best_tree: str, progress: Progress | None, at: tuple[int, int],
              due: tuple[int, list], stand_in: int, check: bool
              ) -> tuple[list[float], list, list, list[str], list[Measurement]]:
    """The baseline's profiles of `best_tree`: `due` = (how many profiled runs to make, back to back:
    BASELINE_PROFILES less init's; none without a profiler, init's traces that stand for the first
    ones: `_init_traces`, no SM clock sampled); of the runs made, the first `stand_in` also stand for
    plain runs (their Measurements returned, each through the correctness gate; `check`: the
    [correctness] command with the first). `at`: (the first run's progress step, the total). Returns
    the target kernels' GPU time per profile (us), the traces, the SM clocks, the target kernels
    (the first trace's) and the standing Measurements. Raises RefereeError (a failed profile, no
    target kernel, a failed gate, a protected write)."""
    cfg = sess.what.cfg
    profiles, traces, clocks, kernels, stood = [], [], [], [], []
    for trace in due[1]:
        _add_profile(trace, None, cfg.profiler.kernel, (profiles, traces, clocks, kernels))
    for i in range(due[0]):
        if progress:
            progress(at[0] + i, at[1], f"baseline: profiling with {prof.name} ({i + 1} of {due[0]})"
                     + ("; its results stand for a plain run" if i < stand_in else ""))
        p = sess.profile(prof, best_tree, sess.books.store.run_dir(0, "baseline-profile"), check=check and i == 0)
        _baseline_changes(sess, p.changes)
        if i < stand_in:
            stood.append(_passed(sess, p.measurement, p.error or "the profiled run left no results to read"))
        if p.trace is None:
            raise RefereeError(f"profiling the baseline failed: {p.error}. Fix it, or set [profiler] "
                               "backend = \"none\" to decide on the script metric alone")
        _add_profile(p.trace, p.clock, cfg.profiler.kernel, (profiles, traces, clocks, kernels))
    return profiles, traces, clocks, kernels, stood


def _add_profile(trace, clock, kernel_regex: str, into: tuple[list, list, list, list[str]]) -> None:
    """Append one profile to `into` = (target GPU times (us), traces, clocks, target kernels: the first
    trace's names, filled once). Raises RefereeError where the trace has no target kernel."""
    profiles, traces, clocks, kernels = into
    try:
        us, names = target_gpu_time(trace, kernel_regex or exact_names_regex(kernels))
    except ProfilerError as e:
        raise RefereeError(str(e)) from e
    profiles.append(us)
    traces.append(trace)
    clocks.append(clock)
    if not kernels:
        kernels.extend(names)


def _plain_runs(sess: Session, progress: Progress | None, steps: int, best_tree: str, adoption: Adoption,
                wanted: int) -> tuple[list[dict[str, float]], Measurement | None, list[float]]:
    """The baseline's first `wanted` plain runs of `best_tree`: init's adopted runs (referee/baseline_adopt.py),
    the rest measured here, the [correctness] command with the first measured one unless init's run of
    it is adopted. Returns each run's metric per class, the run shown in the result (None: none yet)
    and the wall times (s). Raises RefereeError as `baseline` does."""
    runs = sess.what.cfg.gates.baseline_runs
    group = [a.values() for a in adoption.runs]
    walls = [a.run.duration_s for a in adoption.runs]
    m = adoption.runs[0] if adoption.runs else None
    check_due = not adoption.tests
    for i in range(len(adoption.runs), wanted):
        if progress:
            progress(i, steps, f"baseline: run {i + 1} of {runs} of unmodified BEST_COMMIT")
        label = "baseline" if i == 0 else f"baseline-r{i + 1}"
        # the [correctness] command once, with the first run measured here (unless init's run of it stands)
        mi = sess.measure(best_tree, sess.books.store.run_dir(0, label), check=check_due)
        check_due = False
        _baseline_changes(sess, mi.changes)
        mi = _passed(sess, mi, "")
        m = m or mi  # the first run is the one shown in the result
        group.append(mi.values())
        walls.append(mi.run.duration_s)
    return group, m, walls


def _passed(sess: Session, mi: Measurement | None, missing: str) -> Measurement:
    """`mi` where it passed the correctness gate; else the failure is logged and RefereeError raised
    (`missing`: why there is no measurement, for a profiled run that left none)."""
    if mi is None:
        raise RefereeError(f"profiling the unmodified benchmark gave no results to read ({missing}); fix it, or set "
                           "[profiler] backend = \"none\" to decide on the script metric alone")
    if mi.gate.kind != "ok":
        sess.books.store.log("baseline_failed", reason=mi.gate.reason, run_dir=mi.run_dir)
        raise RefereeError(
            f"the unmodified benchmark does not pass the correctness gate ({mi.gate.reason}); fix the "
            f"repository or kopt.toml and start again. Log: {mi.run.log_path}")
    return mi


def _baseline_changes(sess: Session, changes: list[FileChange]) -> None:
    """A run of the unchanged benchmark: its writes to tracked files become benchmark outputs;
    a write to a protected file stops the baseline (RefereeError: the repository must change)."""
    hits = touched_protected([c.path for c in changes], protected_paths(sess.what, sess.where))
    if hits:
        bad = [c for c in changes if c.path in hits]
        raise RefereeError(
            f"{describe(bad, 'the unmodified benchmark')}, a protected file: a benchmark may not write its "
            "own harness, oracle, config or performance.md (every candidate would be rejected). Make it write "
            "its outputs elsewhere (an ignored folder such as results/), then start again")
    judge_run_changes(sess, changes, "the run of BEST_COMMIT")


def _baseline_spreads(traces: list, totals_us: list[float], kernel_regex: str | None,
                      clocks: list | None = None) -> list[float]:
    """Spreads (%) between the baseline's adjacent profiles of BEST_COMMIT: by harness unit
    (rules.units.unit_spread_pct) where both traces have units, marked or segmented; by launch group
    (rules.keep.group_spread_pct, median launch per kernel + grid/block) where both carry launch
    groups, so a harness that picks its own repetition count (do_bench) does not inflate them; only
    where neither trace has either (an aggregate-only trace), between the target kernels' totals (us,
    one per trace, all > 0). A pair is left out where its units do not pair and its launch groups
    differ (one process ran work the other did not, e.g. an uncached autotuner's configs: its
    difference is that work, not noise), or where its SM clocks differ (`clocks`: RunClock or None per
    trace; rules.clocks.SAME_CLOCK_PCT: the clock step, which the keep metric handles by clock)."""
    out = []
    clocks = clocks or [None] * len(traces)
    for i, ((t1, us1), (t2, us2)) in enumerate(zip(zip(traces, totals_us), zip(traces[1:], totals_us[1:]))):
        if not same_clock(clocks[i], clocks[i + 1]):
            continue
        u1, u2 = trace_units(t1), trace_units(t2)
        by_unit = unit_spread_pct(u1, u2, kernel_regex or ".") if u1 and u2 else None
        if by_unit is not None:  # per invocation of each harness unit (rules/units.py)
            out.append(by_unit)
        elif t1.groups is not None and t2.groups is not None:
            try:
                out.append(group_spread_pct(t1, t2, kernel_regex))
            except ProfilerError:
                continue  # other target groups launched: not comparable
        elif not (u1 or u2):
            out.append(spread_pct(us1, us2))
    return out


def bench_result(sess: Session, what: str, m: Measurement, recorded: bool,
                 runs: list[dict[str, float]] | None = None) -> BenchmarkResult:
    """The result of one run; for the baseline (`recorded`) each class shows the value recorded
    in performance.md and BEST's metrics (the median of the baseline runs), not the first run's, and
    with `runs` (each baseline run's metric per class) each class's runs and their spread (%: the
    run-to-run SD the noise estimate uses, rules.stats.noise_from_groups)."""
    best = sess.books.state.best.metrics
    shown = best if recorded else {}

    def spread(key: str) -> dict:
        vals = [r[key] for r in runs or [] if key in r]
        est = noise_from_groups([vals])
        return {"runs": vals, "spread_pct": est.run_sd_pct if est.df else None} if vals else {}

    classes = [ClassMetric(key=c.key, metric=shown.get(c.key, c.metric), correct=c.correct, errors=c.errors,
                           **spread(c.key)) for c in (m.table.classes if m.table else [])]
    vs = {c.key: improvement_pct(best[c.key], c.metric, sess.what.cfg.benchmark.higher_is_better)
          for c in classes if c.key in best and not recorded}
    return BenchmarkResult(
        what=what, device=sess.jobs.device, ok=m.gate.kind == "ok", gate=m.gate.kind, reason=m.gate.reason,
        metric=sess.what.cfg.benchmark.metric, classes=classes, vs_best_pct=vs, exit_code=m.run.exit_code,
        duration_s=m.run.duration_s, log_path=m.run.log_path, log_tail=m.run.log_tail[-2000:],
        baseline_recorded=recorded, best_commit=sess.books.state.best.commit,
        next_actions=next_actions(sess.books.state),
        detectable=_detectable(sess.what, runs) if recorded and runs else None)


#: the gains (%) the baseline's `detectable.rounds_for` says the rounds of
WANTED_GAINS_PCT = (2.0, 5.0, 10.0, 25.0, 50.0)


def _detectable(what: What, runs: list[dict[str, float]]) -> Detectable | None:
    """What a verdict can detect (rules/detectable.py) with the baseline runs' spread of the global
    target (the geometric mean of the classes), and per class with that class's own spread; None where
    the global target's is not measurable (one run, a value <= 0)."""
    try:
        est = noise_from_groups([[target_value(r, GLOBAL) for r in runs]])
    except (ValueError, KeyError):
        return None
    if est.df == 0:
        return None
    pol, hib, g = what.policy, what.cfg.benchmark.higher_is_better, what.cfg.gates
    bound = max(g.max_rounds, g.max_rounds_asked)
    d = detectable(est.run_sd_pct, est.df, pol.script_rounds, pol, hib)
    wanted = [RoundsFor(effect_pct=e, ratio_x=round(1 + e / 100 if hib else 100 / (100 - e), 3),
                        rounds=rounds_for(e, est.run_sd_pct, est.df, pol, bound, hib)) for e in WANTED_GAINS_PCT]
    classes = _class_detectable(what, runs)
    return Detectable(
        target=GLOBAL, target_spread_pct=round(est.run_sd_pct, 3), df=est.df, rounds=pol.script_rounds, power=POWER,
        min_effect_pct=_r3(d.effect_pct), min_effect_x=_r3(d.ratio_x), rounds_for=wanted, max_rounds_asked=bound,
        classes=classes, note=_detectable_note(what, est.run_sd_pct, est.df, d.effect_pct, d.ratio_x, classes, bound))


def _r3(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


def _class_detectable(what: What, runs: list[dict[str, float]]) -> list[ClassDetectable]:
    """Per config class of the baseline runs: its own spread and what a verdict targeting it detects."""
    out = []
    for key in runs[0]:
        est = noise_from_groups([[r[key] for r in runs if key in r]])
        if est.df:
            d = detectable(est.run_sd_pct, est.df, what.policy.script_rounds, what.policy,
                           what.cfg.benchmark.higher_is_better)
            out.append(ClassDetectable(key=key, spread_pct=round(est.run_sd_pct, 3), df=est.df,
                                       min_effect_pct=_r3(d.effect_pct), min_effect_x=_r3(d.ratio_x)))
    return out


def _span(values: list[float], fmt: str) -> str:
    """'16.97% .. 28.99%' (or one value) in `fmt` (e.g. '{:.2f}%')."""
    lo, hi = min(values), max(values)
    return fmt.format(lo) if lo == hi else f"{fmt.format(lo)} .. {fmt.format(hi)}"


def _detectable_note(what: What, sd: float, df: int, effect: float | None, ratio: float | None,
                     classes: list[ClassDetectable], bound: int) -> str:
    """The `detectable` note: every spread by its field's name, which one a verdict's bound uses, and
    what the noise threshold is (issue 36 item 2: a global 4% beside per-class 17-29% read as a contradiction)."""
    pol = what.policy
    shown = f"{effect:+.2f}% ({ratio:.2f}x)" if effect is not None else "nothing"
    text = f"with the global target's run-to-run spread target_spread_pct {sd:.2f}% ({df} df"
    if len(classes) > 1:
        text += (f"; the geometric mean over the {len(classes)} classes: noise independent between classes averages "
                 f"out in it, noise they share does not; each class's own, classes[].spread_pct "
                 f"{_span([c.spread_pct for c in classes], '{:.2f}%')}")
    text += (f") and {pol.script_rounds} paired rounds, a verdict on target global keeps a gain of {shown} or more "
             f"{POWER:.0%} of the time (the script metric's keep test"
             f"{'; on a GPU the profiler GPU time decides' if pol.profiler_confirms else ''})")
    effects = [c.min_effect_pct for c in classes if c.min_effect_pct is not None]
    if len(classes) > 1 and effects:
        text += (f"; a verdict targeting one class has that class's own spread in its bound and detects "
                 f"{_span(effects, '{:+.2f}%')} (detectable.classes[].min_effect_pct)")
    return text + (f"; the [gates] noise_pct {pol.noise_pct:g}% threshold is a fixed level each round's change is "
                   f"compared with, not a measured spread; more rounds detect less: save_and_test(rounds=N), "
                   f"N <= {bound} ([gates] max_rounds_asked)")
