"""The out-of-process confirmation rule (DESIGN.md: commit gate; issue 11 item 4), pure: does the
GPU-time gain measured by a profiler that is the benchmark's parent process (ncu / rocprofv3,
kopt_mcp/profilers/confirm.py) reproduce the gain the in-process keep verdict claimed?

`decide_confirmation` returns a `Confirmation` (`status` confirmed / refuted / unavailable, with a
stable `code`); `TargetTime` is its evidence: the target's GPU time per step measured out of process.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kopt_mcp.evidence.confirm import StoredTargetTime, TargetTime
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.light import judge_light

Status = Literal["confirmed", "refuted", "unavailable"]

#: part of the claimed gain the out-of-process gain may fall short by, on top of the floor: ncu
#: serializes launches (no overlap with the neighbours the CUPTI run had) and sees a few launches per
#: unit or launch configuration only, so a real 30% win may read 27%
AGREE_FRACTION = 0.25
#: how old (s) a tree's stored out-of-process measurement may be to stand for BEST at the next commit's
#: confirmation (`reusable_best`); the device gate checks the GPU is idle before every run either way
BEST_REUSE_MAX_AGE_S = 3600.0


class Confirmation(BaseModel):
    """The out-of-process check of a keep.

    `status`: "confirmed" (the independent gain agrees: commit), "refuted" (it shows no gain, or
    falls short of the claim by more than `tolerance_pct`, or the candidate could not be measured
    where BEST could: do not commit), "unavailable" (no ncu / rocprofv3 here, `[profiler] confirm =
    "off"`, or BEST itself could not be measured: the commit proceeds on the verdict alone and says
    so). Times in us per benchmark step (sum of median launches), gains in %."""

    status: Status
    reason: str
    backend: str | None = None
    claimed_gain_pct: float
    floor_pct: float
    tolerance_pct: float | None = None
    best: TargetTime | None = None
    candidate: TargetTime | None = None
    gain_pct: float | None = None
    #: the run folders' labels, for the ledger
    runs: list[str] = Field(default_factory=list)
    #: why (kopt_mcp.rules.decision.Code): confirmed, refuted or unconfirmed; refuted by the speed of
    #: light (rules/light.py): beyond_speed_of_light, too_few_bytes or persisting_l2
    code: Code
    #: the confirming profiler's target selection (profilers/confirm.py selection_key); True where
    #: BEST's figure was a stored one of the same tree (rules/confirm.py reusable_best), not a new run
    selection: str | None = None
    best_reused: bool = False
    #: the candidate's achieved DRAM bandwidth as % of the device's peak (ncu's DRAM bytes / GPU time), where
    #: measured; left out of dumps (the ledger's event schema): its parts are in `candidate` (gbps, peak_gbps)
    pct_of_peak: float | None = Field(default=None, exclude=True)

    @property
    def blocks_commit(self) -> bool:
        """True only for `refuted`: `unavailable` lets the commit proceed (with its reason shown)."""
        return self.status == "refuted"


def gain_pct(best_us: float, candidate_us: float) -> float:
    """GPU-time gain (%, positive = faster) from BEST's and the candidate's time per step (us):
    (best - candidate) / best * 100; 0.0 for best <= 0. The claim to pass to `confirm_keep` is this
    of the keep decision's gpu_best_us / gpu_candidate_us (sums of median launches, the quantity
    `target_time` measures out of process), not its time-share-weighted gpu_delta_pct."""
    return (best_us - candidate_us) / best_us * 100.0 if best_us > 0 else 0.0


def decide_confirmation(claimed_gain_pct: float, floor_pct: float, best: TargetTime | None,
                        candidate: TargetTime | None, backend: str, best_error: str | None = None,
                        candidate_error: str | None = None, agree_fraction: float = AGREE_FRACTION) -> Confirmation:
    """The rule (pure). Inputs: the keep verdict's claimed gain of the target's GPU time (%,
    positive = faster) and its GPU-time floor (%); the out-of-process target times of BEST and of
    the candidate (None with `*_error` saying why where a run gave none); the backend's name.

    - BEST not measured: `unavailable` (the tool cannot measure this benchmark here; the commit
      proceeds on the verdict and the reason says why).
    - the candidate not measured where BEST was: `refuted` (it behaves differently under the
      out-of-process profiler: a crash, or no target launch).
    - by harness unit (both runs carry `units`): a unit of BEST where the candidate launched no target
      kernel: `refuted` (skipped work); else best and candidate are the sums over BEST's units.
    - speed of light (rules/light.py, where ncu measured DRAM bytes): beyond the device's peak, far
      fewer bytes than BEST's, or a larger persisting-L2 set-aside: `refuted` with that code;
    - gain g = (best - candidate) / best * 100; tolerance = floor + agree_fraction x claimed gain.
      g <= 0: `refuted` (no gain); g < claimed - tolerance: `refuted` (the claim is not reproduced);
      else `confirmed` (a gain above the claim too: the reason says so).

    The reason names every number. Never raises."""
    tol = floor_pct + agree_fraction * max(claimed_gain_pct, 0.0)
    base = {"backend": backend, "claimed_gain_pct": claimed_gain_pct, "floor_pct": floor_pct, "best": best,
            "candidate": candidate}
    if best is None:
        return Confirmation(status="unavailable", code=Code.UNCONFIRMED, **base, reason=(
            f"{backend} (out of process) could not measure BEST_COMMIT's target: {best_error or 'no result'}; "
            f"the keep rests on the in-process verdict alone ({claimed_gain_pct:+.2f}%)"))
    if candidate is None:
        return Confirmation(status="refuted", code=Code.REFUTED, **base, tolerance_pct=tol, reason=(
            f"{backend} (out of process) measured BEST_COMMIT ({best.us:.2f} us per step over {best.launches} "
            f"launches) but not the candidate: {candidate_error or 'no result'}. A candidate that fails or launches "
            "no target kernel under the out-of-process profiler is not committed"))
    lost = sorted(set(best.units) - set(candidate.units)) if best.units and candidate.units else []
    if lost:
        return Confirmation(status="refuted", code=Code.REFUTED, **base, tolerance_pct=tol, reason=(
            f"{backend} (out of process) measured the target in {len(best.units)} harness unit(s) of BEST_COMMIT, "
            f"but the candidate launched no target kernel in unit(s) {', '.join(map(str, lost[:8]))}: work the "
            "candidate skips is not a gain"))
    light = judge_light(best, candidate)
    if light.code is not None:
        return Confirmation(status="refuted", code=light.code, **base, tolerance_pct=tol, pct_of_peak=light.pct_of_peak,
                            reason=f"{backend} (out of process): {light.reason}")
    base["pct_of_peak"] = light.pct_of_peak
    best_us, cand_us, how = best.us, candidate.us, "median launch per launch group"
    if best.units and candidate.units:
        best_us = sum(best.units.values())
        cand_us = sum(candidate.units[k] for k in best.units)
        how = f"median invocation per harness unit, {len(best.units)} units"
    gain = gain_pct(best_us, cand_us)
    need = claimed_gain_pct - tol
    names = ", ".join(best.kernels) or "the target"
    numbers = (f"{backend} (benchmark's parent process) measured {names} at {best_us:.2f} -> {cand_us:.2f} us "
               f"per step ({gain:+.2f}%; {how}, {best.launches} and {candidate.launches} "
               f"launches); the in-process verdict claimed {claimed_gain_pct:+.2f}%; agreement needs > 0 and >= "
               f"{need:+.2f}% (the claim less {tol:.2f}% = GPU-time floor {floor_pct:.2f}% + "
               f"{agree_fraction * 100:g}% of the claim)")
    if gain <= 0:
        return Confirmation(status="refuted", code=Code.REFUTED, **base, tolerance_pct=tol, gain_pct=gain,
                            reason=f"refuted: {numbers}. Out of process the candidate is not faster: the in-process "
                                   "timing or trace did not measure what the GPU did")
    if gain < need:
        return Confirmation(status="refuted", code=Code.REFUTED, **base, tolerance_pct=tol, gain_pct=gain,
                            reason=f"refuted: {numbers}. The claimed gain is not reproduced out of process")
    more = ("; the out-of-process gain exceeds the claim by more than the tolerance (reported only)"
            if gain > claimed_gain_pct + tol else "")
    return Confirmation(status="confirmed", code=Code.CONFIRMED, **base, tolerance_pct=tol, gain_pct=gain,
                        reason=f"confirmed: {numbers}{more}" + (f"; {light.shown()}" if light.shown() else ""))


def reusable_best(stored: StoredTargetTime | None, best_commit: str, selection: str, device: str | None, now: float,
                  max_age_s: float = BEST_REUSE_MAX_AGE_S) -> TargetTime | None:
    """BEST's out-of-process measurement without a run (pure): the stored measurement of a tree (the
    candidate's run of the last confirmed commit) stands for BEST where BEST_COMMIT (`best_commit`) is the
    commit that holds the tree it measured, with the same target selection on the same device, at most `max_age_s`
    seconds before `now` (time.time(), s). Else None: BEST runs again. Saves one of the two runs of
    every confirmation after the first (issue 34 item 6: a commit <= 1.5x one plain run). Never raises."""
    if stored is None or stored.commit != best_commit or stored.selection != selection or stored.device != device:
        return None
    return stored.time if 0.0 <= now - stored.at <= max_age_s else None


__all__ = ["AGREE_FRACTION", "BEST_REUSE_MAX_AGE_S", "Confirmation", "TargetTime", "decide_confirmation", "gain_pct",
           "reusable_best"]
