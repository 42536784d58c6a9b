"""commit_improvement (the commit gate): only the exact tree that got `improved`; run the format
command (in the workspace; a changed workspace becomes a new frozen snapshot, which is what is then
measured and committed); re-measure against BEST in the same lease, each run in a disposable
checkout verified afterwards (and re-profile if formatting changed the tree); commit the snapshot
tree + the server's performance.md only if still better (never a tree left after a run); then
BEST_COMMIT moves, the workspace is reset to the new commit and counters reset.

Candidate slots share BEST through the cross-process lock `best.lock` (referee/slots.py). The
re-measure runs outside it, so other slots keep measuring and committing meanwhile; the lock is
taken for the commit itself, after checking that BEST has not moved. When it has (another slot
committed during the re-measure), the round starts again from the exact tested tree: re-applied
onto the newest BEST and measured against it. The last of `ROUNDS` rounds holds the lock from its
start, so a commit step always ends."""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass

from kopt_mcp import vcs
from kopt_mcp.bench.measure import included_outputs, raise_if_cancelled
from kopt_mcp.errors import RefereeError, Tampered
from kopt_mcp.referee.commit_measure import Remeasure, remeasure
from kopt_mcp.referee.commit_reapply import reapply_onto_best
from kopt_mcp.referee.confirmation import bind_confirmed, by_marked_units, confirm_out_of_process
from kopt_mcp.referee.core import Progress, Session
from kopt_mcp.referee.guards import protected_paths, workspace_moved
from kopt_mcp.referee.neutral import keep_neutral
from kopt_mcp.referee.recovery import adopt_best, lease_or_stop, recover
from kopt_mcp.referee.report import commit_message, format_note, gpu_change_cells, keep_note, perf_rows
from kopt_mcp.referee.runs import Attempt
from kopt_mcp.referee.slots import best_lock, read_shared, sync
from kopt_mcp.results import CommitResult
from kopt_mcp.results_change import Cost
from kopt_mcp.rules.commit import pooled_best
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.protect import touched_protected, unsafe_symlinks
from kopt_mcp.rules.script_only import script_only_commit
from kopt_mcp.session import next_actions, require
from kopt_mcp.testing import faults


def commit_improvement(sess: Session, message: str = "", progress: Progress | None = None,
                       neutral_reason: str = "") -> CommitResult:
    """Commit the pending improvement if it survives formatting and a re-measure; with `neutral_reason`,
    keep the latest `tie` as neutral instead (referee/neutral.py). Cancelled, or
    any error: finished or undone exactly as a restart would (a commit that exists is adopted,
    else the exact tested tree restored; the phase stays `improved`). Raises SessionError outside
    phase improved, RefereeError when the workspace changed since the verdict or the format
    command fails. The result's `overtaken_rounds` (also in the ledger's `commit` record) counts
    the earlier rounds another slot's commit overtook (0 to ROUNDS - 1)."""
    if neutral_reason.strip():
        return keep_neutral(sess, neutral_reason, message)
    try:
        for n in range(1, ROUNDS + 1):
            with best_lock(sess) if n == ROUNDS else nullcontext():  # the last round cannot be overtaken
                sync(sess)
                if n > 1 and progress:
                    progress(0, 4, f"BEST moved during the re-measure (another slot committed): round {n} of "
                             f"at most {ROUNDS}, re-applying onto the newest BEST and measuring again")
                out = _commit(sess, message, progress, overtaken=n - 1)
            if out is not None:
                out.overtaken_rounds = n - 1
                if n > 1:
                    out.reason += (f" (BEST moved during {n - 1} earlier re-measure(s): re-applied onto the "
                                   "newest BEST and measured against it)")
                return out
            _restart(sess)
        raise AssertionError("the last round holds the BEST lock: BEST cannot move during it")
    finally:
        job = sess.books.state.in_progress
        if job and job.get("tool") == "commit_improvement":
            recover(sess)


#: commit rounds: a round whose re-measure is overtaken by another slot's commit starts again
ROUNDS = 3


def _restart(sess: Session) -> None:
    """BEST moved while this round re-measured: the workspace back to the exact tested tree (the
    next round re-applies the frozen attempt onto the newest BEST), the job ended."""
    vcs.restore_tree(sess.where.ws, sess.books.state.pending.tree)
    sess.books.state.end_job()
    sess.books.save()


def _best_moved(sess: Session) -> bool:
    """True when the shared BEST (best.json) is no longer this slot's BEST_COMMIT. Decisive only under
    best_lock; without it, an early look that saves the rest of an overtaken round."""
    shared = read_shared(sess.where)
    return shared is not None and shared["commit"] != sess.books.state.best.commit


@dataclass(frozen=True)
class Kept:
    """What a commit round whose re-measure still favours the candidate hands to `_write_commit`: the
    re-measure (`rm`: its decision, script and GPU-time figures, runs), BEST's new stored metric per
    config class (pooled over every run of this tree: rules/commit.py pooled_best), its GPU time (us;
    None when the keep was not decided on profiler GPU time), whether the format command changed the
    tree, whether it was re-applied onto a newer BEST, the out-of-process confirmation's note ("" for
    none), how many earlier rounds were overtaken, BEST's GPU time where this commit profiled a new
    tree (None: the verdict's profiles stand), the `[commit] include` files, the commit's code
    (still_better; confirmed / unconfirmed where the out-of-process confirmation ran) and its cost."""

    rm: Remeasure
    metrics: dict[str, float]
    gpu_us: float | None
    formatted: bool
    reapplied: bool
    note: str = ""
    overtaken_rounds: int = 0
    gpu_best_us: float | None = None
    #: `[commit] include` result files as the re-measure's run of this tree wrote them (repo path -> bytes)
    outputs: dict[str, bytes] | None = None
    code: Code = Code.STILL_BETTER
    cost: Cost | None = None
    confirmed: str = ""  # the out-of-process confirmation's figure where it confirmed, e.g. "ncu out of process +1.2%"


def _commit(sess: Session, message: str, progress: Progress | None, overtaken: int = 0) -> CommitResult | None:
    """One commit round (`overtaken`: how many earlier rounds were overtaken). None when another
    slot moved BEST during its re-measure (nothing written)."""
    s, cfg = sess.books.state, sess.what.cfg
    require(s, "commit_improvement")
    p = s.pending
    sess.where.check_branch()
    if sess.workspace_tree() != p.tree:
        raise RefereeError(
            "the workspace changed since save_and_test ruled `improved` on attempt "
            f"{p.attempt}: only the exact tested tree can be committed. Undo the edits, or call "
            "save_and_test again (a new attempt), or revert_to_best")
    a = Attempt(n=p.attempt, target=p.target, hypothesis=p.hypothesis, tree=p.tree,
                best_tree=vcs.tree_of(sess.where.ws, s.best.commit), class_gpu_us=p.candidate_class_gpu_us,
                class_op_us=p.candidate_class_op_us, op_us=p.candidate_op_us)
    s.begin_job("commit_improvement", attempt=p.attempt)
    sess.books.save()
    refused = (script_only_commit(cfg.gates.allow_script_only_keeps, p.vendor, cfg.profiler.backend)
               if p.script_only else None)  # a keep only the script metric decided (rules/script_only.py)
    if refused is not None:
        return _not_kept(sess, refused.reason, False, [], code=refused.code)
    reapplied = bool(p.base and p.base != s.best.commit)
    if reapplied:  # BEST moved since the verdict (another slot committed): onto the newest BEST first
        refused = reapply_onto_best(sess, a, p.base)
        if refused is not None:
            return refused
    formatted = False
    if cfg.format.command:
        if progress:
            progress(0, 4, "running the format command")
        r = sess.services.run(cfg.format.command, sess.where.workspace_path, {}, cfg.format.timeout_s,
                              sess.books.store.run_dir(p.attempt, "format") / "format.log", cancel=sess.jobs.cancel,
                              pid_dir=sess.where.pid_dir)
        raise_if_cancelled(r)
        if r.exit_code != 0:
            raise RefereeError(f"the format command failed (exit {r.exit_code}): {r.log_tail[-500:]}")
        new = sess.workspace_tree()
        formatted = new != a.tree
        if formatted:
            refused = _formatted_snapshot(sess, a, new)
            if refused:
                return _not_kept(sess, refused[0], formatted, [], refused[1])
    faults.point("commit_improvement.after_format")
    if lease_or_stop(sess, progress).lease is None:
        raise RefereeError(f"no device to re-measure on: {s.stop_reason or 'cancelled'}")
    t0 = time.monotonic()
    got = _measure(sess, a, formatted, reapplied, progress, t0)
    if not isinstance(got, _Measured):
        return got
    rm, gpu_us, claim, note, code = got.rm, got.gpu_us, got.claim, got.note, got.code
    classes = rm.script.classes if rm.script is not None else []
    moved = workspace_moved(sess, a.tree)
    if moved:
        return _not_kept(sess, moved, formatted, classes, Code.TAMPERED)
    # BEST's stored figures from every measurement of this tree: the verdict's runs and the commit's
    runs = ([] if formatted or reapplied else list(p.candidate_run_metrics)) + rm.cand_runs
    metrics = pooled_best(runs) or (rm.cand_runs[-1] if rm.cand_runs else dict(p.candidate_metrics))
    with best_lock(sess):  # the serialized commit step: BEST moves one slot at a time
        if _best_moved(sess):
            return None
        return _write_commit(sess, a, Kept(rm, metrics, gpu_us, formatted, reapplied, note, overtaken,
                                           claim[0] if (formatted or reapplied) and gpu_us is not None else None,
                                           _included(sess, rm.cand_run_dir), code,
                                           cost=_cost(sess, rm, t0), confirmed=got.confirmed),
                             message, progress)


@dataclass
class _Measured:
    """The re-measure and confirmation that let a commit go on: `gpu_us` the candidate's GPU time (us;
    None: the script metric decided), `claim` (BEST us, candidate us, floor %) as confirmed, `note` the
    load and confirmation sentences, `code` the commit's code."""

    rm: Remeasure
    gpu_us: float | None
    claim: tuple[float | None, float | None, float | None]
    note: str
    code: Code
    confirmed: str = ""  # the out-of-process confirmation's figure where it confirmed


def _measure(sess: Session, a: Attempt, formatted: bool, reapplied: bool, progress: Progress | None,
             t0: float) -> _Measured | CommitResult | None:
    """The commit's re-measure with the verdict's metric and rule (referee/commit_measure.py), then the
    out-of-process confirmation of a GPU-time keep. Where the verdict stood unmeasured (its bounds are
    tight: rules/commit.py verdict_stands) and the confirmation did not confirm (unavailable: BEST not
    measurable out of process), the in-process re-measure runs after all. Returns a refusal
    (CommitResult), None (another slot moved BEST), or what the commit goes on with."""
    p, stand, conf = sess.books.state.pending, True, None
    while True:
        try:
            rm = remeasure(sess, a, list(p.verdict_rounds), fresh_tree=formatted or reapplied, formatted=formatted,
                           progress=progress, stand=stand)
        except Tampered as e:
            return _not_kept(sess, str(e), formatted, [], Code.TAMPERED)
        rm.runs += len(conf.runs) if conf is not None else 0  # the confirmation before this re-measure
        faults.point("commit_improvement.after_remeasure")
        if _best_moved(sess):  # overtaken: this round's runs were judged against a stale BEST
            return None
        classes = rm.script.classes if rm.script is not None else []
        if rm.decision.outcome == "wait":
            raise RefereeError(rm.decision.reason)
        if rm.decision.outcome != "commit":
            return _not_kept(sess, rm.decision.reason, formatted, classes, rm.decision.code, cost=_cost(sess, rm, t0))
        gpu_us, claim = p.candidate_gpu_us, (p.gpu_best_us, p.candidate_gpu_us, p.gpu_floor_pct)
        if rm.gpu is not None and rm.gpu.keep.gpu_candidate_us is not None:
            keep = rm.gpu.keep
            if formatted or reapplied:  # a new tree: the claim to confirm is the commit's own
                claim = (keep.gpu_best_us, keep.gpu_candidate_us, rm.gpu.floor.pct if rm.gpu.floor else p.gpu_floor_pct)
            gpu_us = (keep.gpu_candidate_us if (formatted or reapplied or gpu_us is None)
                      else (gpu_us + keep.gpu_candidate_us) / 2.0)
        note = f" The re-measure ran under foreign load ({rm.loaded})." if rm.loaded else ""
        code = rm.decision.code
        if gpu_us is not None and conf is None:  # the profiler's GPU time decided the keep: confirm it out of process
            if progress:
                progress(2, 4, "confirming the GPU-time gain out of process (ncu / rocprofv3 as the benchmark's parent)")
            try:
                conf = confirm_out_of_process(sess, a, claim, by_marked_units(rm.gpu.keep) if rm.gpu else p.gpu_by_unit)
            except Tampered as e:
                return _not_kept(sess, str(e), formatted, classes, Code.TAMPERED)
            if conf is not None:
                rm.runs += len(conf.runs)
                if conf.status == "refuted":  # archived as improved-not-kept
                    return _not_kept(sess, conf.reason, formatted, classes, conf.code, cost=_cost(sess, rm, t0))
        if code == Code.VERDICT_STANDS and (conf is None or conf.status != "confirmed"):
            stand = False  # nothing measured it again: re-measure in process after all
            continue
        confirmed = ""
        if conf is not None:
            note, code = f"{note} Out-of-process confirmation: {conf.reason}", conf.code
            if conf.status == "confirmed" and conf.gain_pct is not None:
                confirmed = f"{conf.backend or 'the profiler'} out of process {conf.gain_pct:+.2f}%"
        return _Measured(rm, gpu_us, claim, note, code, confirmed)


def _cost(sess: Session, rm: Remeasure, t0: float) -> Cost:
    """The commit's runs and wall time since `t0` (time.monotonic: the re-measure's start, the
    confirmation included) against one plain run of the benchmark (issue 34 item 6)."""
    return Cost.of(rm.runs, time.monotonic() - t0, sess.books.state.plain_run_s)


def _included(sess: Session, run_dir: str) -> dict[str, bytes]:
    """The `[commit] include` files the re-measure's run of the tested tree rewrote (bench.measure
    keep_included), protected paths left out (the config validation refuses them; the config file's
    own path is checked here)."""
    out = included_outputs(run_dir, list(sess.what.cfg.commit.include))
    bad = set(touched_protected(list(out), protected_paths(sess.what, sess.where)))
    return {k: v for k, v in out.items() if k not in bad}


def _gpu_changes(p, k: Kept) -> dict[str, str] | None:
    """performance.md's per-class GPU-time change of a keep judged by harness unit: the verdict's
    (VerdictSummary.classes_gpu_pct / classes_op_pct); None where another metric decided or the candidate
    was re-applied onto a newer BEST (the verdict compared it with an older one)."""
    v = p.verdict
    if k.reapplied or v is None or not v.classes_gpu_pct:
        return None
    return gpu_change_cells(v.classes_gpu_pct, v.classes_op_pct)


def _write_commit(sess: Session, a: Attempt, k: Kept, message: str, progress: Progress | None) -> CommitResult:
    """Commit the judged snapshot `a.tree` + performance.md on BEST and adopt it (under best_lock)."""
    s, cfg, p, rm = sess.books.state, sess.what.cfg, sess.books.state.pending, k.rm
    metrics, gpu_us = k.metrics, k.gpu_us
    classes = rm.script.classes if rm.script is not None else []
    if progress:
        progress(3, 4, "committing code and performance.md")
    # the per-class change the verdict showed (its mean over the paired rounds); the re-measure's own where the
    # candidate was re-applied onto a newer BEST (the verdict compared it with an older one)
    changes = ({c.key: c.mean_pct for c in classes} if k.reapplied or p.verdict is None or not p.verdict.classes_pct
               else dict(p.verdict.classes_pct))
    title = message.strip() or p.hypothesis.strip() or f"kopt attempt {p.attempt}"
    rows = [r.model_dump() for r in perf_rows(
        "keep", "(this commit)", cfg.benchmark.command, p.target, p.kernels, metrics, gpu_us,
        changes, keep_note(p, title, None if rm.decision.code == Code.VERDICT_STANDS else rm.at_commit_pct(), gpu_us,
                           k.confirmed), class_gpu_us=a.class_gpu_us,
        class_op_us=a.class_op_us, gpu_changes=_gpu_changes(p, k))]
    # what recovery adopts after a crash; the rows go into the `commit` record
    s.in_progress.update(metrics=metrics, gpu_us=gpu_us, rows=rows, overtaken_rounds=k.overtaken_rounds)
    sess.books.save()
    sess.write_performance(extra=[{"event": "commit", "rows": rows}])  # rendered from the ledger
    perf = sess.where.workspace_path / "performance.md"
    faults.point("commit_improvement.after_perf_written")
    outputs = k.outputs or {}
    notes = [("formatted by the [format] command: the formatted tree is what was re-measured and committed"
              if k.formatted else ""),
             (f"re-applied onto the newest BEST {s.best.commit[:12]} (judged against {(p.base or '')[:12]})"
              if k.reapplied else ""),
             (f"result file(s) from the re-measure's run of this tree ([commit] include): {', '.join(outputs)}"
              if outputs else ""), k.note,
             "kopt-mcp keep: script only (no profiler measured it)" if p.script_only else ""]
    text = commit_message(title, p, rm.shown(p.target), notes)
    files = {**outputs, "performance.md": perf.read_bytes()}
    sha = vcs.commit_snapshot(sess.where.ws, a.tree, files, s.best.commit, text)
    faults.point("commit_improvement.after_git_commit")
    bind_confirmed(s, a.tree, sha)  # the confirmation's measurement of this tree now stands for BEST
    # the runs of this very tree (formatting aside): the new BEST's first noise group; re-applied onto a
    # newer BEST, another tree: its record starts empty
    s.record_best_runs([] if k.reapplied else [*p.candidate_run_metrics, *rm.cand_runs], new_best=True)
    code = Code.SCRIPT_ONLY if p.script_only else k.code  # a script-only keep says so (rules/script_only.py)
    adopt_best(sess, p.attempt, sha, metrics, gpu_us, code=str(code), formatted=k.formatted, device=sess.jobs.device_id,
               **({"reapplied_from": p.base} if k.reapplied else {}), overtaken_rounds=k.overtaken_rounds,
               classes=[c.model_dump() for c in classes], rows=rows,
               **({"cost": k.cost.model_dump()} if k.cost is not None else {}))
    s.best.op_us = a.op_us  # the whole operation's GPU time, where judged by harness unit (Stop Summary)
    s.end_job()
    sess.books.save()
    faults.point("commit_improvement.after_state_save")
    return CommitResult(committed=True, reason=f"committed: {rm.decision.reason}; the save_and_test verdict stands."
                        + k.note, code=code, commit=sha, best_commit=sha, formatted=k.formatted, classes=classes,
                        next_actions=next_actions(s), included=sorted(outputs), cost=k.cost,
                        **format_note(cfg.format.command, k.formatted))


def _formatted_snapshot(sess: Session, a: Attempt, tree: str) -> tuple[str, Code] | None:
    """The format command changed the workspace into `tree`: freeze it (hidden ref
    `.../attempts/NNNN-formatted`) and make it the tree measured and committed (`a.tree`).
    Returns why it may not be and the code (protected_path, or unsafe_symlink where only a symlink
    is unsafe), else None."""
    s, n = sess.books.state, a.n
    _, changed = vcs.diff_tree(sess.where.ws, s.best.commit, tree)
    hits = touched_protected(changed, protected_paths(sess.what, sess.where))
    links = vcs.symlinks(sess.where.ws, tree)
    unsafe = unsafe_symlinks([x for x in changed if x in links], links, protected_paths(sess.what, sess.where))
    if hits or unsafe:
        return ("the format command changed " + "; ".join(
            ([f"protected file(s) {', '.join(hits)}"] if hits else []) + unsafe) +
            ": not committed; limit the format command to the kernel sources",
            Code.PROTECTED_PATH if hits else Code.UNSAFE_SYMLINK)
    ref = sess.where.attempt_ref(n, "-formatted")
    vcs.freeze(sess.where.ws, tree, s.best.commit, ref, f"kopt-mcp attempt {n}: formatted, the snapshot re-measured")
    sess.books.store.log("snapshot", attempt=n, tree=tree, ref=ref, formatted=True)
    a.tree = tree
    return None


def _not_kept(sess: Session, reason: str, formatted: bool, classes, code: Code,
              cost: Cost | None = None) -> CommitResult:
    """Not committed (`code`: why): the candidate archived as improved-not-kept, the workspace reset
    to BEST, the `commit_refused` record queued, the latest verdict marked refused (status) and the
    state saved."""
    s, p = sess.books.state, sess.books.state.pending
    patch, _ = vcs.diff_against(sess.where.ws, s.best.commit)
    path = sess.books.store.archive(p.attempt, "improved-not-kept", patch)
    vcs.reset_to(sess.where.ws, s.best.commit)
    faults.point("commit_improvement.after_refused_reset")
    s.commit_refused(str(code), reason)
    sess.books.record("commit_refused", attempt=p.attempt, code=str(code), reason=reason, patch=str(path),
                      **({"cost": cost.model_dump()} if cost is not None else {}))
    sess.books.save()
    return CommitResult(committed=False, reason=reason, code=code, commit=None, best_commit=s.best.commit,
                        formatted=formatted, classes=classes, next_actions=next_actions(s), cost=cost,
                        **format_note(sess.what.cfg.format.command, formatted))
