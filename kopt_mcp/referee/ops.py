"""Referee operations that measure without a verdict: status, the GPU gate, run_benchmark (and the
baseline), kernel_trace_analysis, warm_up_harness, revert_to_best, get_attempt; and the run checks
shared with save_and_test and commit_improvement (every run in a disposable checkout of a snapshot,
verified afterwards: `judge_run_changes`, `workspace_moved`)."""

from __future__ import annotations

import statistics
from pathlib import Path

from kopt_mcp import faults, vcs
from kopt_mcp.ledger import now_iso
from kopt_mcp.metrics import improvement_pct
from kopt_mcp.profilers.base import ProfilerError, exact_names_regex, target_gpu_time
from kopt_mcp.referee.core import BASELINE_MESSAGE, Progress, RefereeBase, RefereeError, operation
from kopt_mcp.referee.measure import Measurement, checkout, measure_snapshot, profile_snapshot, raise_if_cancelled
from kopt_mcp.referee.report import perf_rows
from kopt_mcp.results import (
    AttemptResult,
    BenchmarkResult,
    ClassMetric,
    GpuResult,
    KernelRow,
    RevertResult,
    StatusResult,
    TraceResult,
    WarmupResult,
)
from kopt_mcp.rules.keep import class_gpu_times, group_spread_pct, target_median_us
from kopt_mcp.rules.protect import FileChange, describe, run_changes_verdict, touched_protected
from kopt_mcp.runner import run_command
from kopt_mcp.session import Phase, next_actions, require, spread_pct

#: profiled runs of unmodified BEST_COMMIT at the baseline, back to back: their spreads are the
#: first estimate of the process-to-process shift of GPU time (rules.verdict.gpu_gain_floor)
BASELINE_PROFILES = 4

PATCH_CHARS = 60_000


class Tampered(Exception):
    """A run changed a protected file in its checkout, or the workspace outside it: the attempt is
    `rejected` with this message (which names the files)."""


class OpsMixin(RefereeBase):
    def attempt_ref(self, n: int, suffix: str = "") -> str:
        """The hidden ref holding attempt `n`'s frozen snapshot (a commit whose parent is the
        BEST_COMMIT it was judged against)."""
        return f"refs/kopt/{self.tag}/attempts/{n:04d}{suffix}"

    def judge_run_changes(self, changes: list[FileChange], who: str) -> list[FileChange]:
        """What one run changed in its checkout. A protected path (benchmark, oracle, config,
        performance.md) raises Tampered naming it ("the run rewrote bench.py"). A run of unchanged
        BEST_COMMIT (`who` starts with "the run of BEST") adds its other changes to the session's
        benchmark outputs (logged). Returns the remaining changes, benchmark outputs left out."""
        s = self.state
        reason, rest = run_changes_verdict(changes, protected_paths(self), s.benchmark_outputs, who)
        if reason:
            raise Tampered(reason)
        if rest and who.startswith("the run of BEST"):
            new = sorted({c.path for c in rest} - set(s.benchmark_outputs))
            s.benchmark_outputs = sorted({*s.benchmark_outputs, *new})
            self.store.log("benchmark_outputs", added=new, outputs=s.benchmark_outputs)
            return []
        return rest

    def workspace_moved(self, tree: str) -> str | None:
        """A rejection reason when the workspace no longer holds snapshot `tree` (outputs aside): a
        run wrote outside its own checkout (or the workspace was edited while it was measured);
        None when it is intact."""
        s = self.state
        now = vcs.snapshot(self.ws, s.best.commit, s.benchmark_outputs).tree
        if now == tree:
            return None
        what = describe(vcs.tree_changes(self.ws, tree, now), "it")
        return (f"the run changed the workspace {self.workspace_path} outside its own checkout ({what}), or the "
                "workspace was edited while it was measured: the tested snapshot is archived, nothing written "
                "during the run is kept")

    def status(self) -> StatusResult:
        """Where the session stands (phase, BEST_COMMIT, counters, last verdict, next actions)."""
        s = self.state
        return StatusResult(
            phase=s.phase.value, tag=s.tag, branch=s.branch, workspace=s.workspace, best_commit=s.best.commit,
            best_metrics=s.best.metrics, best_gpu_us=s.best.gpu_us, metric=self.cfg.benchmark.metric,
            benchmark_command=self.cfg.benchmark.command, attempts=s.next_attempt - 1, kept=s.kept,
            consecutive_regressions=s.regressions.consecutive,
            max_consecutive_regressions=self.cfg.gates.max_consecutive_regressions,
            repairs_used=s.repair.repairs_used if s.repair else None,
            last_verdict=s.last.model_dump() if s.last else None, stop_reason=s.stop_reason,
            config_sha256=s.config_sha256, config_changed=self.config.changed(), device=self.device,
            next_actions=next_actions(s), state_dir=str(self.state_dir), problems=list(self.problems))

    @operation
    def find_idle_gpu(self, progress: Progress | None = None) -> GpuResult:
        """The availability gate: lease an idle device (waiting up to gpu_wait_s), or stop."""
        with self.lock:
            require(self.state, "find_idle_gpu")
            out = self.lease(progress)
            self.store.log("gpu_gate", leased=out.lease is not None, reason=out.reason, waited_s=out.waited_s)
            return GpuResult(leased=out.lease is not None, device=self.device, checks=out.checks,
                             waited_s=out.waited_s, reason=out.reason or out.device_note,
                             stopped=self.state.phase == Phase.stopped)

    def _need_device(self, progress: Progress | None) -> None:
        out = self.lease(progress)
        if out.lease is None:
            raise RefereeError(f"no device: {out.reason}. " + (
                "The session stopped." if self.state.phase == Phase.stopped else "Call again later."))

    def _bench_result(self, what: str, m: Measurement, recorded: bool) -> BenchmarkResult:
        """The result of one run; for the baseline (`recorded`) each class shows the value recorded
        in performance.md and BEST's metrics (the median of the baseline runs), not the first run's."""
        shown = self.state.best.metrics if recorded else {}
        classes = [ClassMetric(key=c.key, metric=shown.get(c.key, c.metric), correct=c.correct, errors=c.errors)
                   for c in (m.table.classes if m.table else [])]
        best = self.state.best.metrics
        vs = {c.key: improvement_pct(best[c.key], c.metric, self.cfg.benchmark.higher_is_better)
              for c in classes if c.key in best and not recorded}
        return BenchmarkResult(
            what=what, device=self.device, ok=m.gate.kind == "ok", gate=m.gate.kind, reason=m.gate.reason,
            metric=self.cfg.benchmark.metric, classes=classes, vs_best_pct=vs, exit_code=m.run.exit_code,
            duration_s=m.run.duration_s, log_path=m.run.log_path, log_tail=m.run.log_tail[-2000:],
            baseline_recorded=recorded, best_commit=self.state.best.commit, next_actions=next_actions(self.state))

    @operation
    def run_benchmark(self, progress: Progress | None = None) -> BenchmarkResult:
        """Run the fixed benchmark once. Before the baseline exists: measure unmodified BEST_COMMIT
        (in the BEST worktree) and record it as the baseline. After: measure the workspace as it is
        (quick check; no verdict, nothing kept)."""
        with self.lock:
            require(self.state, "run_benchmark")
            self._need_device(progress)
            if self.state.phase == Phase.needs_baseline:
                return self._baseline(progress)
            n = self.state.next_attempt
            if progress:
                progress(0, 1, "running the benchmark on the workspace")
            tree = vcs.snapshot(self.ws, self.state.best.commit, self.state.benchmark_outputs).tree
            m = measure_snapshot(self.cfg, self.ws, tree, self.store.run_dir(n, "check"), self.env(), self.cancel,
                                 self.pid_dir)
            note = self._run_note(m.changes)
            self.store.log("run_benchmark", gate=m.gate.kind, values=m.values(), run_dir=m.run_dir, snapshot=tree,
                           changes=[c._asdict() for c in m.changes])
            res = self._bench_result("workspace", m, recorded=False)
            return res.model_copy(update={"reason": "; ".join(x for x in (res.reason, note) if x)}) if note else res

    def _run_note(self, changes: list[FileChange]) -> str:
        """A note on what a run without a verdict (check, trace, warm-up) changed in its checkout;
        a protected file is named as save_and_test would reject it. Empty when nothing changed."""
        try:
            rest = self.judge_run_changes(changes, "the run")
        except Tampered as e:
            return f"{str(e).split(':')[0]} (save_and_test rejects a candidate whose run does this)"
        return (describe(rest) + " in its disposable checkout (nothing in the workspace changed)") if rest else ""

    def _baseline(self, progress: Progress | None) -> BenchmarkResult:
        runs = self.cfg.gates.baseline_runs
        prof = self.profiler()
        profiles_due = BASELINE_PROFILES if prof.name != "none" else 0
        steps = runs + profiles_due  # the progress total
        group, m = [], None
        best_tree = vcs.tree_of(self.ws, self.state.best.commit)
        for i in range(runs):
            if progress:
                progress(i, steps, f"baseline: run {i + 1} of {runs} of unmodified BEST_COMMIT")
            label = "baseline" if i == 0 else f"baseline-r{i + 1}"
            # the [correctness] command once, with the first run
            mi = measure_snapshot(self.cfg, self.ws, best_tree, self.store.run_dir(0, label), self.env(), self.cancel,
                                  self.pid_dir, check=i == 0)
            self._baseline_changes(mi.changes)
            if mi.gate.kind != "ok":
                self.store.log("baseline_failed", reason=mi.gate.reason, run_dir=mi.run_dir)
                raise RefereeError(
                    f"the unmodified benchmark does not pass the correctness gate ({mi.gate.reason}); fix the "
                    f"repository or kopt.toml and start again. Log: {mi.run.log_path}")
            m = m or mi  # the first run is the one shown in the result
            group.append(mi.values())
        baseline_values = {k: statistics.median(g[k] for g in group) for k in group[0]}
        gpu_us, kernels, note = None, [], "no profiler: the script metric is the keep metric"
        class_gpu_us: dict[str, float] | None = None
        profiles: list[float] = []  # adjacent profiled runs: the first spreads for the keep metric's floor
        traces = []
        for i in range(profiles_due):
            if progress:
                progress(runs + i, steps, f"baseline: profiling with {prof.name} ({i + 1} of {profiles_due})")
            p = profile_snapshot(self.cfg, prof, self.ws, best_tree, self.store.run_dir(0, "baseline-profile"),
                                 self.env(), self.cancel, self.pid_dir)
            self._baseline_changes(p.changes)
            if p.trace is None:
                raise RefereeError(f"profiling the baseline failed: {p.error}. Fix it, or set [profiler] "
                                   "backend = \"none\" to decide on the script metric alone")
            try:
                us, names = target_gpu_time(p.trace, self.cfg.profiler.kernel or exact_names_regex(kernels))
            except ProfilerError as e:
                raise RefereeError(str(e)) from e
            profiles.append(us)
            traces.append(p.trace)
            if i == 0:
                gpu_us, kernels = us, names
        regex = self.cfg.profiler.kernel or exact_names_regex(kernels)
        spreads = _baseline_spreads(traces, profiles, regex)
        if traces and traces[0].groups is not None:  # the keep metric's quantity: the median launch per group
            gpu_us = target_median_us(traces[0], regex)[0]
            class_gpu_us = class_gpu_times(traces[0], list(baseline_values), regex)
        if profiles:
            note = f"keep metric: profiler GPU time of {', '.join(k[:60] for k in kernels)}"
        s = self.state
        s.in_progress = {"tool": "baseline", "since": now_iso(), "base": s.best.commit}
        self.save()  # the marker first: a kill below leaves something `_recover_baseline` can undo
        s.best.metrics, s.best.gpu_us, s.best.kernels = baseline_values, gpu_us, kernels
        s.record_best_runs(group)
        for spread in spreads:
            s.record_spread_pct(spread)
        rows = [r.model_dump() for r in perf_rows(
            "baseline", s.best.commit, self.cfg.benchmark.command, "global", kernels, s.best.metrics,
            gpu_us, None, f"unmodified BEST_COMMIT on {self.device.name}; {note}", class_gpu_us=class_gpu_us)]
        # queued with its performance.md rows; performance.md is rendered from the ledger
        rec = self.record("baseline", best_commit=s.best.commit, metrics=s.best.metrics, runs=group, gpu_us=gpu_us,
                          kernels=kernels, gpu_profiles_us=profiles, device=self.device.model_dump(),
                          run_dir=m.run_dir, rows=rows)
        self.write_performance()
        faults.point("baseline.after_perf_written")
        s.best.commit = rec["best_commit"] = vcs.commit_paths(self.ws, ["performance.md"], BASELINE_MESSAGE)
        faults.point("baseline.after_git_commit")
        vcs.ensure_best_worktree(self.repo, self.best_path, s.best.commit)
        faults.point("baseline.after_best_worktree")
        s.phase, s.in_progress = Phase.ready, None
        self.save()  # the commit point: the baseline record is committed with the phase
        return self._bench_result("baseline (BEST_COMMIT)", m, recorded=True)

    def _baseline_changes(self, changes: list[FileChange]) -> None:
        """A run of the unchanged benchmark: its writes to tracked files become benchmark outputs;
        a write to a protected file stops the baseline (RefereeError: the repository must change)."""
        hits = touched_protected([c.path for c in changes], protected_paths(self))
        if hits:
            bad = [c for c in changes if c.path in hits]
            raise RefereeError(
                f"{describe(bad, 'the unmodified benchmark')}, a protected file: a benchmark may not write its "
                "own harness, oracle, config or performance.md (every candidate would be rejected). Make it write "
                "its outputs elsewhere (an ignored folder such as results/), then start again")
        self.judge_run_changes(changes, "the run of BEST_COMMIT")

    @operation
    def kernel_trace_analysis(self, top: int = 10, progress: Progress | None = None) -> TraceResult:
        """Profile the workspace once in detail mode; hottest kernels first (at most `top`)."""
        from kopt_mcp.profilers.bottleneck import classify
        from kopt_mcp.profilers.ncu import short_kernel_name

        with self.lock:
            require(self.state, "kernel_trace_analysis")
            self._need_device(progress)
            prof = self.profiler(detail=True)
            run_dir = self.store.run_dir(self.state.next_attempt, "trace")
            if prof.name == "none":
                return TraceResult(backend="none", device=self.device, available=False, total_gpu_us=0.0,
                                   kernels=[], target_kernels=[], target_gpu_us=None, log_path="",
                                   notes=[f"no profiler for device {self.device.vendor} (backend "
                                          f"{self.cfg.profiler.backend!r}): the keep metric is the script metric"])
            if progress:
                progress(0, 1, f"profiling the workspace with {prof.name}")
            tree = vcs.snapshot(self.ws, self.state.best.commit, self.state.benchmark_outputs).tree
            p = profile_snapshot(self.cfg, prof, self.ws, tree, run_dir, self.env(), self.cancel, self.pid_dir)
            if p.trace is None:
                raise RefereeError(f"profiling failed: {p.error} (log: {p.log_path})")
            notes = list(p.trace.warnings)
            note = self._run_note(p.changes)
            if note:
                notes.append(note)
            try:
                gpu_us, names = target_gpu_time(p.trace, self.cfg.profiler.kernel or None)
            except ProfilerError as e:
                gpu_us, names = None, []
                notes.append(str(e))
            # bottleneck of the target: the hottest kernel matching the regex, or the hottest kernel
            target = next((k for k in p.trace.kernels if k.name in names), None)
            bottleneck = classify(target) if target is not None else None
            rows = [KernelRow(**k.model_dump(), short_name=short_kernel_name(k.name)) for k in p.trace.kernels[:top]]
            self.store.log("trace", run_dir=str(run_dir), target_gpu_us=gpu_us, target_kernels=names, backend=prof.name,
                           bottleneck=bottleneck.model_dump() if bottleneck else None,
                           total_gpu_us=p.trace.total_gpu_us,
                           kernels=[{"name": k.short_name, "calls": k.calls, "total_us": k.total_us,
                                     "avg_us": k.avg_us, "median_us": k.median_us, "share_pct": k.share_pct,
                                     "registers_per_thread": k.registers_per_thread,
                                     "shared_mem_per_block_bytes": k.shared_mem_per_block_bytes,
                                     **k.extra} for k in rows])
            return TraceResult(backend=prof.name, device=self.device, available=True,
                               total_gpu_us=p.trace.total_gpu_us, kernels=rows, target_kernels=names,
                               target_gpu_us=gpu_us, notes=notes, log_path=p.log_path, bottleneck=bottleneck)

    @operation
    def warm_up_harness(self, progress: Progress | None = None) -> WarmupResult:
        """Run the warm-up command twice (cold, then warm) with the shared JIT caches."""
        with self.lock:
            require(self.state, "warm_up_harness")
            self._need_device(progress)
            w = self.cfg.warmup
            cmd = w.command or self.cfg.benchmark.command
            run_dir = self.store.run_dir(self.state.next_attempt, "warmup")
            times, ok, tail = [], True, ""
            tree = vcs.snapshot(self.ws, self.state.best.commit, self.state.benchmark_outputs).tree
            with checkout(self.ws, tree, self.repo_path.name) as co:  # one checkout: cold, then warm
                for i, label in enumerate(("cold", "warm")):
                    if progress:
                        progress(i, 2, f"warm-up: {label} run")
                    r = run_command(cmd, co / self.cfg.benchmark.workdir, self.env(), w.timeout_s,
                                    run_dir / f"{label}.log", cancel=self.cancel, pid_dir=self.pid_dir)
                    raise_if_cancelled(r)
                    times.append(r.duration_s)
                    ok = ok and r.exit_code == 0
                    tail = r.log_tail[-1000:]
                changes = vcs.run_changes(self.ws, tree, co)
            self.store.log("warmup", cold_s=times[0], warm_s=times[1], ok=ok, snapshot=tree,
                           changes=[c._asdict() for c in changes])
            return WarmupResult(command=cmd, cold_s=times[0], warm_s=times[1], ok=ok,
                                cache_dirs=self.cache_dirs, log_tail=tail)

    @operation
    def revert_to_best(self, reason: str = "") -> RevertResult:
        """Archive the working diff, then reset the workspace to BEST_COMMIT."""
        with self.lock:
            require(self.state, "revert_to_best")
            self.check_branch()
            patch, changed = vcs.diff_against(self.ws, self.state.best.commit)
            path = None
            n = None
            if changed:
                n = self.state.next_attempt
                self.state.next_attempt += 1
                # the number first (a kill below: recovery archives the untouched tree as `interrupted`)
                self.state.in_progress = {"attempt": n, "tool": "save_and_test", "since": now_iso()}
                self.save()
                path = str(self.store.archive(n, "reverted", patch))
            vcs.reset_to(self.ws, self.state.best.commit)
            faults.point("revert.after_reset")
            if self.state.phase in (Phase.repairing, Phase.improved):
                self.state.phase = Phase.ready
            self.state.repair = None
            self.state.pending = None
            self.state.in_progress = None
            self.record("revert", reason=reason, archived=path, changed=changed, attempt=n)
            self.save()
            return RevertResult(archived_patch=path, changed_files=changed, best_commit=self.state.best.commit,
                                next_actions=next_actions(self.state))

    @operation
    def get_attempt(self, attempt: int) -> AttemptResult:
        """An archived attempt: its patch (first PATCH_CHARS characters) and ledger record."""
        path = self.store.find_patch(attempt)
        if path is None:
            raise RefereeError(f"no archived attempt {attempt}; attempts so far: 1..{self.state.next_attempt - 1}")
        text = path.read_text(encoding="utf-8", errors="replace")
        record = next((e for e in reversed(self.store.ledger())
                       if e.get("event") == "attempt" and e.get("attempt") == attempt), None)
        return AttemptResult(attempt=attempt, patch_path=str(path), patch=text[:PATCH_CHARS],
                             truncated=len(text) > PATCH_CHARS, record=record)


def protected_paths(ref: RefereeBase) -> list[str]:
    """[protect] paths plus the config file (when it lies inside the repository)."""
    paths = list(ref.cfg.protect.paths)
    try:
        paths.append(Path(ref.config.path).relative_to(ref.repo_path).as_posix())
    except ValueError:
        pass
    return paths


def _baseline_spreads(traces: list, totals_us: list[float], kernel_regex: str | None) -> list[float]:
    """Spreads (%) between the baseline's adjacent profiles of BEST_COMMIT: by launch group
    (rules.keep.group_spread_pct, median launch per kernel + grid/block) where both traces carry
    launch groups, so a harness that picks its own repetition count (do_bench) does not inflate
    them; else between the target kernels' totals (us, one per trace, all > 0)."""
    out = []
    for (t1, u1), (t2, u2) in zip(zip(traces, totals_us), zip(traces[1:], totals_us[1:])):
        if t1.groups is not None and t2.groups is not None:
            try:
                out.append(group_spread_pct(t1, t2, kernel_regex))
                continue
            except ProfilerError:
                pass
        out.append(spread_pct(u1, u2))
    return out
