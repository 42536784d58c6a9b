"""The out-of-process confirmation of a GPU-time gain, run on this call's lease (commit_improvement
before every GPU-time keep; save_and_test where the target kernels compiled and launched exactly as
BEST's: rules/provenance.py)."""

from __future__ import annotations

from kopt_mcp.errors import MeasurementError
from kopt_mcp.profilers.confirm import confirm_keep
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.runs import Attempt, profile_run
from kopt_mcp.rules.confirm import Confirmation, gain_pct


def confirm_out_of_process(sess: Session, a: Attempt, claim: tuple[float | None, float | None, float | None]
                           ) -> Confirmation | None:
    """The commit-time out-of-process confirmation of a GPU-time keep (profilers.confirm.confirm_keep):
    the candidate and BEST run once more on this call's lease under a profiler that is the benchmark's
    parent process (ncu; rocprofv3 on AMD), each in a disposable checkout verified afterwards. Its
    record goes to the ledger (`confirmation`). `claim`: BEST's and the candidate's GPU time (us) in
    the keep decision and the floor (%) it cleared. None when the claim is incomplete (a session
    saved before these fields existed). Raises Tampered."""

    best_us, cand_us, floor = claim
    if best_us is None or cand_us is None:
        return None

    def run_profiled(tree: str, prof, label: str):
        pr = profile_run(sess, a, prof, tree, label)
        if pr.trace is None:
            raise MeasurementError(pr.error or "no trace")
        return pr.trace

    vendor = sess.device.vendor if sess.device else "cpu"
    conf = confirm_keep(run_profiled, a.tree, a.best_tree, claimed_gain_pct=gain_pct(best_us, cand_us),
                        floor_pct=floor if floor is not None else sess.policy.min_gpu_gain_pct, vendor=vendor,
                        setting=sess.cfg.profiler.confirm, kernel_regex=sess.cfg.profiler.kernel or None,
                        target_names=sess.state.best.kernels)
    sess.store.log("confirmation", attempt=a.n, **conf.model_dump(mode="json"))
    return conf
