"""Referee operations that measure without a verdict: status, the GPU gate, run_benchmark (the
baseline is in baseline.py), kernel_trace_analysis, warm_up_harness, revert_to_best, get_attempt;
and the run checks shared with save_and_test and commit_improvement (every run in a disposable
checkout of a snapshot, verified afterwards: `judge_run_changes`, `workspace_moved`).

Each operation is a plain function over a `Session` (referee/core.py); `Referee` serializes it."""

from __future__ import annotations

from pathlib import Path

from kopt_mcp import vcs
from kopt_mcp.bench.measure import checkout, raise_if_cancelled
from kopt_mcp.bench.sandbox import run_sandbox, sandbox_status
from kopt_mcp.errors import ProfilerError, RefereeError
from kopt_mcp.evidence.names import short_kernel_name
from kopt_mcp.evidence.trace import KernelTrace, target_gpu_time
from kopt_mcp.profilers.bottleneck import classify, classify_cpu
from kopt_mcp.profilers.pyspy import PySpyProfiler, protect_paths, pyspy_error, too_short_to_sample, work_samples
from kopt_mcp.referee.baseline import baseline, bench_result
from kopt_mcp.referee.core import Progress, Session
from kopt_mcp.referee.gpu_target import own_of
from kopt_mcp.referee.guards import run_note
from kopt_mcp.referee.recovery import lease_or_stop
from kopt_mcp.referee.slots import slots_status
from kopt_mcp.results import (
    AttemptResult,
    BenchmarkResult,
    GpuResult,
    KernelRow,
    RevertResult,
    StatusResult,
    TraceResult,
    WarmupResult,
)
from kopt_mcp.session import Phase, next_actions, require
from kopt_mcp.testing import faults

PATCH_CHARS = 12_000  # a get_attempt result stays well under an MCP client's 25k-token cap; the file is whole


def status(sess: Session) -> StatusResult:
    """Where the session stands (phase, BEST_COMMIT, counters, last verdict, next actions)."""
    s, cfg = sess.books.state, sess.what.cfg
    return StatusResult(
        phase=s.phase.value, tag=s.tag, branch=s.branch, workspace=s.workspace, best_commit=s.best.commit,
        best_metrics=s.best.metrics, best_gpu_us=s.best.gpu_us, metric=cfg.benchmark.metric,
        benchmark_command=cfg.benchmark.command, attempts=s.next_attempt - 1, kept=s.kept,
        consecutive_regressions=s.regressions.consecutive,
        max_consecutive_regressions=cfg.gates.max_consecutive_regressions,
        repairs_used=s.repair.repairs_used if s.repair else None,
        last_verdict=s.last.model_dump() if s.last else None, stop_reason=s.stop_reason,
        config_sha256=s.config_sha256, config_changed=sess.what.config.changed(), device=sess.jobs.device,
        next_actions=next_actions(s), state_dir=str(sess.where.state_dir), problems=list(sess.books.problems),
        slots=slots_status(sess.where), sandbox=sandbox_status())


def find_idle_gpu(sess: Session, progress: Progress | None = None) -> GpuResult:
    """The availability gate as a probe: find an idle device (waiting up to gpu_wait_s), or stop.
    The lease found is NOT kept: it ends with this call (every measuring call leases its own
    device, preferring this one)."""
    require(sess.books.state, "find_idle_gpu")
    out = lease_or_stop(sess, progress)
    sess.books.store.log("gpu_gate", leased=out.lease is not None, reason=out.reason, waited_s=out.waited_s,
                         device=sess.jobs.device_id)
    return GpuResult(leased=out.lease is not None, device=sess.jobs.device, checks=out.checks,
                     waited_s=out.waited_s, reason=out.reason or out.device_note,
                     stopped=sess.books.state.phase == Phase.stopped)


def need_device(sess: Session, progress: Progress | None) -> None:
    """Lease a device for a measuring call, or raise RefereeError (the session may have stopped)."""
    out = lease_or_stop(sess, progress)
    if out.lease is None:
        raise RefereeError(f"no device: {out.reason}. " + (
            "The session stopped." if sess.books.state.phase == Phase.stopped else "Call again later."))


def run_benchmark(sess: Session, progress: Progress | None = None) -> BenchmarkResult:
    """Run the fixed benchmark once. Before the baseline exists: measure unmodified BEST_COMMIT
    (in the BEST worktree) and record it as the baseline. After: measure the workspace as it is
    (quick check; no verdict, nothing kept)."""

    require(sess.books.state, "run_benchmark")
    need_device(sess, progress)
    if sess.books.state.phase == Phase.needs_baseline:
        return baseline(sess, progress)
    n = sess.books.state.next_attempt
    if progress:
        progress(0, 1, "running the benchmark on the workspace")
    tree = sess.workspace_tree()
    m = sess.measure(tree, sess.books.store.run_dir(n, "check"))
    note = run_note(sess, m.changes)
    sess.books.store.log("run_benchmark", gate=m.gate.kind, values=m.values(), run_dir=m.run_dir, snapshot=tree,
                         changes=[c._asdict() for c in m.changes], device=sess.jobs.device_id)
    res = bench_result(sess, "workspace", m, recorded=False)
    return res.model_copy(update={"reason": "; ".join(x for x in (res.reason, note) if x)}) if note else res


#: what an agent on a CPU can do where no sampling profile could be taken
CPU_INSTEAD = ("Instead: read the code the benchmark calls and look for Python loops over rows or elements, "
               "temporary arrays and repeated allocations; optimization_knowledge(bottleneck='cpu-bound') lists "
               "CPU techniques; run_benchmark gives the time per config class; then edit and call save_and_test")


def _no_trace(sess: Session, backend: str, notes: list[str]) -> TraceResult:
    return TraceResult(backend=backend, device=sess.jobs.device, available=False, kernels=[], target_kernels=[],
                       log_path="", notes=notes)


def _no_profiler_notes(sess: Session) -> list[str]:
    """Why there is no trace on this device and the next step (available=false)."""
    vendor = sess.jobs.device.vendor if sess.jobs.device else "cpu"
    if vendor == "cpu":
        return ["no sampling profiler: py-spy is not installed here (pip install py-spy; kopt-mcp depends on it) "
                "or an injected profiler factory gave none. " + CPU_INSTEAD]
    return [f"no kernel profiler for the {vendor} device (backend {sess.what.cfg.profiler.backend!r}): the keep metric "
            "is the script metric. To see kernels install " + (
                "cupti-python (pip install cupti-python) or Nsight Compute (ncu on PATH)" if vendor == "nvidia"
                else "ROCm's rocprofv3 (rocprofiler-sdk)") + "; meanwhile edit the kernel and call save_and_test"]


def kernel_trace_analysis(sess: Session, top: int = 10, progress: Progress | None = None) -> TraceResult:
    """Profile the workspace once in detail mode; hottest kernels first (at most `top`). On a CPU
    device: py-spy's sampled run, hottest Python functions first (`cpu`, at most `top`). Without a
    profiler, or where py-spy could not run: available=false and notes saying what to do instead."""

    require(sess.books.state, "kernel_trace_analysis")
    need_device(sess, progress)
    prof = sess.profiler(detail=True)
    run_dir = sess.books.store.run_dir(sess.books.state.next_attempt, "trace")
    if prof.name == "none":
        return _no_trace(sess, "none", _no_profiler_notes(sess))
    if isinstance(prof, PySpyProfiler):  # the protected files are the harness's, never the own code's
        prof = prof.scoped(protect_paths(sess.what.cfg.protect.paths, sess.what.cfg.benchmark.workdir))
    if progress:
        progress(0, 1, f"profiling the workspace with {prof.name}")
    tree = sess.workspace_tree()
    origin = trace_origin(sess, tree)  # which BEST the trace is of (research_directions marks a stale one)
    p = sess.profile(prof, tree, run_dir)
    note = run_note(sess, p.changes)
    changed = [note] if note else []  # what the run changed: said whether or not a trace came back
    if p.trace is None and prof.name == PySpyProfiler.name:
        why = pyspy_error(Path(p.log_path)) or p.error
        return _no_trace(sess, prof.name, [
            f"py-spy could not profile the benchmark: {why} (log: {p.log_path}). It samples Python processes, "
            "and only while they run: a command that starts none, or ends within a fraction of a second, leaves "
            "nothing to sample; it also must read its child's memory (Yama ptrace_scope 0 or 1). " + CPU_INSTEAD,
            *changed])
    if p.trace is None:
        raise RefereeError(f"profiling failed: {p.error} (log: {p.log_path})")
    if p.trace.cpu is not None and too_short_to_sample(p.trace.cpu):
        c = p.trace.cpu
        return _no_trace(sess, prof.name, [
            f"py-spy caught {work_samples(c)} samples of the benchmark's work (its own code, or libraries outside "
            f"an import) among {c.samples} over {c.sampled_ms:.0f} ms of {c.runs} run{'s' if c.runs != 1 else ''} "
            f"({c.import_pct:.0f}% imports, "
            f"{c.no_python_pct:.0f}% outside Python): too few to say where the time goes. The run ended, or only "
            "waited, too soon: make one run last a second or more to see it. " + CPU_INSTEAD, *changed])
    notes = list(p.trace.warnings) + changed
    if p.trace.cpu is not None:
        return _cpu_trace(sess, p.trace, top, notes, run_dir, p.log_path, origin)
    try:
        gpu_us, names = target_gpu_time(p.trace, sess.what.cfg.profiler.kernel or None)
    except ProfilerError as e:
        gpu_us, names = None, []
        notes.append(str(e))
    # bottleneck of the target: the hottest kernel matching the regex, or the hottest kernel
    target = next((k for k in p.trace.kernels if k.name in names), None)
    bottleneck = classify(target) if target is not None else None
    rows = [KernelRow(**k.model_dump(), short_name=short_kernel_name(k.name)) for k in p.trace.kernels[:top]]
    sess.books.store.log("trace", **origin, run_dir=str(run_dir), device=sess.jobs.device_id, target_gpu_us=gpu_us,
                         target_kernels=names, backend=prof.name,
                         bottleneck=bottleneck.model_dump() if bottleneck else None,
                         total_gpu_us=p.trace.total_gpu_us,
                         kernels=[{"name": k.short_name, "calls": k.calls, "total_us": k.total_us,
                                   "avg_us": k.avg_us, "median_us": k.median_us, "share_pct": k.share_pct,
                                   "registers_per_thread": k.registers_per_thread,
                                   "shared_mem_per_block_bytes": k.shared_mem_per_block_bytes,
                                   **k.extra} for k in rows])
    own, own_regex = own_of(p.trace, sess.where.workspace_path)  # the profiled tree's sources
    return TraceResult(backend=prof.name, device=sess.jobs.device, available=True,
                       total_gpu_us=p.trace.total_gpu_us, kernels=rows, target_kernels=names,
                       target_gpu_us=gpu_us, notes=notes, log_path=p.log_path, bottleneck=bottleneck,
                       own_kernels=own, own_regex=own_regex)


def trace_origin(sess: Session, tree: str) -> dict:
    """What a trace of snapshot `tree` is of, for its `trace` record: the BEST_COMMIT of the time and
    whether `tree` is BEST's own (False: the workspace held a candidate's edits)."""
    best = sess.books.state.best.commit
    return {"best_commit": best, "of_best": tree == vcs.tree_of(sess.where.ws, best)}


def _cpu_trace(sess: Session, trace: KernelTrace, top: int, notes: list[str], run_dir, log_path: str,
               origin: dict | None = None) -> TraceResult:
    """kernel_trace_analysis's result for a sampled CPU run: the `top` hottest functions, the
    cpu-bound class with its evidence, logged as a `trace` event (with `origin`: trace_origin)."""
    cpu = trace.cpu.model_copy(update={"functions": trace.cpu.functions[:top],
                                       "harness_functions": trace.cpu.harness_functions[:top]})
    bottleneck = classify_cpu(trace.cpu)
    sess.books.store.log("trace", **(origin or {}), run_dir=str(run_dir), device=sess.jobs.device_id,
                         backend=trace.backend,
                         bottleneck=bottleneck.model_dump(),
                         functions=[{"function": f.function, "file": f.file, "line": f.line, "self_pct": f.self_pct,
                                     "total_pct": f.total_pct} for f in cpu.functions])
    return TraceResult(backend=trace.backend, device=sess.jobs.device, available=True, kernels=[], target_kernels=[],
                       notes=notes, log_path=log_path, bottleneck=bottleneck, cpu=cpu)  # no GPU figures on the CPU


def warm_up_harness(sess: Session, progress: Progress | None = None) -> WarmupResult:
    """Run the warm-up command twice (cold, then warm) with the shared JIT caches."""
    require(sess.books.state, "warm_up_harness")
    need_device(sess, progress)
    w = sess.what.cfg.warmup
    cmd = w.command or sess.what.cfg.benchmark.command
    run_dir = sess.books.store.run_dir(sess.books.state.next_attempt, "warmup")
    times, ok, tail = [], True, ""
    tree = sess.workspace_tree()
    box = run_sandbox(sess.where.kopt_dir.parent, run_dir)
    where = sess.where
    with checkout(where.ws, tree, where.repo_path.name) as co, sess.state_guarded():  # one checkout: cold, then warm
        for i, label in enumerate(("cold", "warm")):
            if progress:
                progress(i, 2, f"warm-up: {label} run")
            r = sess.services.run(cmd, co / sess.what.cfg.benchmark.workdir, sess.env(), w.timeout_s,
                                  run_dir / f"{label}.log", cancel=sess.jobs.cancel, pid_dir=where.pid_dir, sandbox=box)
            raise_if_cancelled(r)
            times.append(r.duration_s)
            ok = ok and r.exit_code == 0
            tail = r.log_tail[-1000:]
        changes = vcs.run_changes(sess.where.ws, tree, co)
    sess.books.store.log("warmup", cold_s=times[0], warm_s=times[1], ok=ok, snapshot=tree, device=sess.jobs.device_id,
                         changes=[c._asdict() for c in changes])
    return WarmupResult(command=cmd, cold_s=times[0], warm_s=times[1], ok=ok,
                        cache_dirs=sess.where.cache_dirs, log_tail=tail)


def revert_to_best(sess: Session, reason: str = "") -> RevertResult:
    """Archive the working diff, then reset the workspace to BEST_COMMIT."""
    s = sess.books.state
    require(s, "revert_to_best")
    sess.where.check_branch()
    patch, changed = vcs.diff_against(sess.where.ws, s.best.commit)
    path = None
    n = None
    if changed:
        n = s.new_attempt()
        # the number first (a kill below: recovery archives the untouched tree as `interrupted`)
        s.begin_job("save_and_test", attempt=n)
        sess.books.save()
        path = str(sess.books.store.archive(n, "reverted", patch))
    vcs.reset_to(sess.where.ws, s.best.commit)
    faults.point("revert.after_reset")
    s.dropped_candidate()
    s.end_job()
    sess.books.record("revert", reason=reason, archived=path, changed=changed, attempt=n)
    sess.books.save()
    return RevertResult(archived_patch=path, changed_files=changed, best_commit=s.best.commit,
                        next_actions=next_actions(s))


def get_attempt(sess: Session, attempt: int) -> AttemptResult:
    """An archived attempt: its patch (first PATCH_CHARS characters) and ledger record."""
    path = sess.books.store.find_patch(attempt)
    if path is None:
        raise RefereeError(f"no archived attempt {attempt}; attempts so far: 1..{sess.books.state.next_attempt - 1}")
    text = path.read_text(encoding="utf-8", errors="replace")
    record = next((e for e in reversed(sess.books.store.ledger())
                   if e.get("event") == "attempt" and e.get("attempt") == attempt), None)
    return AttemptResult(attempt=attempt, patch_path=str(path), patch=text[:PATCH_CHARS],
                         truncated=len(text) > PATCH_CHARS, record=record)
