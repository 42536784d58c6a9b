"""The out-of-process confirmation of a GPU-time gain, run on this call's lease (commit_improvement
before every GPU-time keep; save_and_test where the target kernels compiled and launched exactly as
BEST's: rules/provenance.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from kopt_mcp.errors import MeasurementError
from kopt_mcp.evidence.confirm import StoredTargetTime, TargetTime
from kopt_mcp.profilers.confirm import (
    DEFAULT_LAUNCH_COUNT,
    ConfirmNcu,
    ConfirmProfiler,
    RunProfiled,
    confirm_profiler,
    measure_trees,
    selection_key,
)
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.runs import Attempt, profile_run
from kopt_mcp.rules.confirm import Confirmation, decide_confirmation, gain_pct, reusable_best
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.units import UnitKeepDecision
from kopt_mcp.session import SessionState


def confirm_keep(run_profiled: RunProfiled, cand_tree: str, best_tree: str, claimed_gain_pct: float,
                 floor_pct: float, vendor: str, setting: str = "auto", kernel_regex: str | None = None,
                 target_names: Sequence[str] = (), launch_count: int = DEFAULT_LAUNCH_COUNT,
                 profiler: ConfirmProfiler | None = None, by_unit: bool = False,
                 best_known: Callable[[str], TargetTime | None] | None = None, flops: bool = False) -> Confirmation:
    """Confirm a keep with one out-of-process measurement of the candidate and of BEST.

    Where: in commit_improvement, inside the re-measure's GPU lease, after the re-measure found the
    candidate still better (and, when formatting changed the tree, after its keep metric), before
    the git commit. `refuted`: not committed (archive the patch, reset to BEST, phase ready, the
    ledger records the Confirmation); `unavailable`: commit, with `reason` among the warnings.

    `run_profiled(tree, profiler, label)`: runs the fixed benchmark of snapshot `tree` under
    `profiler` (its `wrap` command, in a disposable checkout, on the leased GPU) and returns
    `profiler.parse(run_dir)`; raises ProfilerError / MeasurementError when the run failed or left
    no trace (any other exception, e.g. the referee's Tampered, propagates). Labels:
    "confirm-candidate", "confirm-best" (run folder names). The candidate runs first, then BEST.

    `claimed_gain_pct` / `floor_pct`: the keep verdict's GPU-time gain (`gain_pct` of its
    gpu_best_us and gpu_candidate_us) and the GPU-time floor it cleared (%). `vendor`,
    `setting` ([profiler] confirm), `kernel_regex` ([profiler] kernel), `target_names` (BEST's
    target kernels), `launch_count`, `by_unit` (measure per marked harness unit, as the keep was
    judged), `flops` (count the floating-point work too: [profiler] confirm_flops): see `confirm_profiler`;
    `profiler` overrides the choice.

    By unit, where BEST's run held no marked launch, both trees run again by launch configuration
    (`ConfirmNcu.by_launch_config`; four runs in all).

    `best_known(selection)`: BEST's stored measurement under that target selection (`selection_key`;
    rules/confirm.py reusable_best), or None: where it gives one, BEST is not run (one run in all) and
    the Confirmation says `best_reused`.

    Returns a Confirmation (see `decide_confirmation`); `unavailable` without running anything when
    no out-of-process profiler applies. Raises ValueError for an unknown `setting`.
    """
    prof, why = (profiler, "") if profiler is not None else confirm_profiler(
        setting, vendor, kernel_regex, target_names, launch_count, by_unit, flops)
    if prof is None:
        return Confirmation(status="unavailable", code=Code.UNCONFIRMED, claimed_gain_pct=claimed_gain_pct,
                            floor_pct=floor_pct, reason=(f"not confirmed out of process: {why}; the keep rests on the "
                                                         f"in-process verdict ({claimed_gain_pct:+.2f}%)"))
    known = best_known(selection_key(prof)) if best_known is not None else None
    runs = measure_trees(run_profiled, cand_tree, best_tree, prof, known)
    labels = ["confirm-candidate"] + ([] if known is not None else ["confirm-best"])
    if isinstance(prof, ConfirmNcu) and prof.by_unit and runs["confirm-best"][0] is None:
        # no marked launch in BEST's run (a harness that times differently under a profiler, or none
        # kopt marks): measure both trees again by launch configuration
        prof = prof.by_launch_config()
        known = best_known(selection_key(prof)) if best_known is not None else None
        runs = measure_trees(run_profiled, cand_tree, best_tree, prof, known)
        labels += ["confirm-candidate"] + ([] if known is not None else ["confirm-best"])
    (cand, cand_error), (best, best_error) = runs["confirm-candidate"], runs["confirm-best"]
    out = decide_confirmation(claimed_gain_pct, floor_pct, best, cand, prof.name, best_error, cand_error)
    out.runs, out.selection, out.best_reused = labels, selection_key(prof), known is not None
    return out


def can_confirm(sess: Session) -> bool:
    """True where a commit's out-of-process confirmation will run here: `[profiler] confirm` is not
    "off" and the device's confirming profiler (ncu / rocprofv3) is on PATH (`confirm_profiler`)."""
    vendor = sess.jobs.device.vendor if sess.jobs.device else "cpu"
    try:
        return confirm_profiler(sess.what.cfg.profiler.confirm, vendor)[0] is not None
    except ValueError:
        return False


def by_marked_units(keep: object) -> bool:
    """True where a keep decision was judged on the injector's marked harness units (rules/units.py):
    its confirmation then measures per unit too (ConfirmNcu `by_unit`)."""
    return isinstance(keep, UnitKeepDecision) and keep.source == "marked"


def confirm_out_of_process(sess: Session, a: Attempt, claim: tuple[float | None, float | None, float | None],
                           by_unit: bool = False) -> Confirmation | None:
    """The commit-time out-of-process confirmation of a GPU-time keep (`confirm_keep`):
    the candidate and BEST run once more on this call's lease under a profiler that is the benchmark's
    parent process (ncu; rocprofv3 on AMD), each in a disposable checkout verified afterwards. Its
    record goes to the ledger (`confirmation`). `claim`: BEST's and the candidate's GPU time (us) in
    the keep decision and the floor (%) it cleared. None when the claim is incomplete (a session
    saved before these fields existed). `by_unit`: the keep was judged on marked harness units
    (`by_marked_units`). Raises Tampered."""

    best_us, cand_us, floor = claim
    if best_us is None or cand_us is None:
        return None

    def run_profiled(tree: str, prof, label: str):
        pr = profile_run(sess, a, prof, tree, label)
        if pr.trace is None:
            raise MeasurementError(pr.error or "no trace")
        return pr.trace

    vendor = sess.jobs.device.vendor if sess.jobs.device else "cpu"
    stored, device, best = sess.books.state.confirmed_tree, sess.jobs.device_id, sess.books.state.best
    conf = confirm_keep(run_profiled, a.tree, a.best_tree, claimed_gain_pct=gain_pct(best_us, cand_us),
                        floor_pct=floor if floor is not None else sess.what.policy.min_gpu_gain_pct, vendor=vendor,
                        setting=sess.what.cfg.profiler.confirm, kernel_regex=sess.what.cfg.profiler.kernel or None,
                        target_names=best.kernels, by_unit=by_unit, flops=sess.what.cfg.profiler.confirm_flops,
                        best_known=lambda sel: reusable_best(stored, best.commit, sel, device, time.time()))
    sess.books.store.log("confirmation", attempt=a.n, **conf.model_dump(mode="json"))
    if conf.status == "confirmed" and conf.candidate is not None and conf.selection is not None:
        # the candidate's tree becomes BEST when this commit lands (commit.py binds the commit): its
        # measurement stands for BEST next time
        sess.books.state.confirmed_tree = StoredTargetTime(tree=a.tree, selection=conf.selection, device=device,
                                                           at=time.time(), time=conf.candidate)
    return conf


def bind_confirmed(state: SessionState, tree: str, commit: str) -> None:
    """Bind the stored out-of-process measurement of `tree` (`confirm_out_of_process`) to `commit`, the
    BEST_COMMIT that now holds that tree (plus performance.md): the next confirmation reuses it for BEST
    (rules/confirm.py reusable_best). Nothing where the stored measurement is of another tree."""
    if state.confirmed_tree is not None and state.confirmed_tree.tree == tree:
        state.confirmed_tree.commit = commit
