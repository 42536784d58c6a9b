"""The keep metric on totals: profiler GPU time of the target kernels over one profiled run of BEST
and of the candidate, paired per launch where the backend recorded each launch (pure).

Used where the trace has no launch groups (rules/keep.py `judge_groups` decides there otherwise),
and without a profiler, where it says the script metric decides alone (`SCRIPT_METRIC_WARNING`).
"""

from __future__ import annotations

import math
import statistics
from typing import Literal

from pydantic import BaseModel

from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.percent import improvement_pct

#: said with every keep the script metric decided alone (no profiler): what the verdict cannot rule out
SCRIPT_METRIC_WARNING = ("a script metric can be forged by code inside the benchmark process (a patched timer, "
                         "a cached result); no per-launch profiler cross-checks it on this device")


class KeepDecision(BaseModel):
    """Whether the keep metric (profiler GPU time) confirms the script metric's win."""

    kept: bool
    gpu_best_us: float | None
    gpu_candidate_us: float | None
    gpu_delta_pct: float | None
    metric_used: Literal["profiler GPU time", "script metric"]
    reason: str
    #: why (kopt_mcp.rules.decision.Code)
    code: Code
    #: the gain's one-sided lower bound (%) where one was computed (paired launches, launch groups, units)
    lower_bound_pct: float | None = None
    #: the gain's one-sided upper bound (%) where one was computed: below -floor, the candidate is slower
    upper_bound_pct: float | None = None


def apply_keep_metric(gpu_best_us: float | None, gpu_candidate_us: float | None, kernels: list[str],
                      best_calls: int | None = None, candidate_calls: int | None = None,
                      best_launches_us: list[float] | None = None, candidate_launches_us: list[float] | None = None,
                      confidence: float = 0.995, min_gain_pct: float = 0.2, suspect: bool = True) -> KeepDecision:
    """Keep-metric rule: with a profiler, the candidate's GPU kernel time of the target kernel(s)
    must be lower than BEST's, else the script-metric win is not kept. Times are totals (us) over
    the profiled run; `*_calls` are the target kernels' launch counts in the same runs.

    Launch counts guard against skipped work: the same fixed benchmark launches the target the
    same number of times, so a candidate with fewer launches (results cached across calls, an
    early return) is not kept. With more launches (e.g. a Triton autotuner trying configs) the
    comparison is per launch (total / calls). Every comparison needs a gain above `min_gain_pct`. Without a profiler (both times None) the script
    metric decides and the result says so; one side missing is never kept.

    Where the backend recorded per-launch times (`*_launches_us`, same length on both sides, in
    launch order) the comparison is paired per launch: launch i of the candidate against launch i
    of BEST (same benchmark step, same shapes); the total gain and the robust paired lower bound
    (`robust_paired_bound`, in `lower_bound_pct`) must both exceed `min_gain_pct`. Per-launch GPU times are so precise
    that an unchanged kernel can differ "significantly" by a few thousandths of a percent (clock
    state, stream placement); the floor keeps such differences from counting as wins.

    `suspect`: the script metric showed a clear, significant win (>= the noise threshold); if GPU
    time then disagrees, the reason names the likely timing cheats. A sub-noise script gain that
    GPU time does not confirm is reported as noise.
    """
    if (gpu_best_us is None) != (gpu_candidate_us is None):
        return KeepDecision(kept=False, gpu_best_us=gpu_best_us, gpu_candidate_us=gpu_candidate_us,
                            gpu_delta_pct=None, metric_used="profiler GPU time", code=Code.GPU_TIME_MISSING,
                            reason="profiler GPU time is missing for one side: not kept (the keep decision "
                            "never falls back to a weaker metric)")
    if gpu_best_us is None or gpu_candidate_us is None:
        return KeepDecision(kept=True, gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None,
                            metric_used="script metric", code=Code.SCRIPT_ONLY,
                            reason=f"no profiler on this device: the script metric decides; {SCRIPT_METRIC_WARNING}")
    names = ", ".join(k[:60] for k in kernels) or "all kernels"
    if best_calls and candidate_calls is not None and candidate_calls < best_calls:
        return KeepDecision(kept=False, gpu_best_us=gpu_best_us, gpu_candidate_us=gpu_candidate_us,
                            gpu_delta_pct=None, metric_used="profiler GPU time", code=Code.SKIPPED_WORK,
                            reason=(f"skipped work: the candidate launched {names} {candidate_calls} times in the "
                                    f"profiled run, BEST {best_calls} times. The fixed benchmark launches it the "
                                    "same number of times unless results are cached across calls or a call "
                                    "returns before doing its work: not kept"))
    paired = (best_launches_us is not None and candidate_launches_us is not None
              and len(best_launches_us) == len(candidate_launches_us) >= 2 and min(best_launches_us) > 0)
    per_launch = not paired and bool(best_calls and candidate_calls and candidate_calls > best_calls)
    b, c = (gpu_best_us / best_calls, gpu_candidate_us / candidate_calls) if per_launch else (gpu_best_us, gpu_candidate_us)
    delta = improvement_pct(b, c, higher_is_better=False)
    kept = delta > min_gain_pct
    lo = hi = None
    if paired:
        lo, n = robust_paired_bound(best_launches_us, candidate_launches_us, confidence)
        hi = -robust_paired_bound(candidate_launches_us, best_launches_us, confidence)[0]  # BEST's gain over it
        kept = kept and lo > min_gain_pct
        how = (f"{b:.1f} -> {c:.1f} us, {delta:+.3f}%; paired over {n} launches, {confidence * 100:g}% lower "
               f"bound {lo:+.3f}%; needs > {min_gain_pct:.3g}%")
    elif per_launch:
        how = (f"per launch ({candidate_calls} launches vs BEST's {best_calls}): {b:.2f} -> {c:.2f} us, "
               f"{delta:+.3f}%; needs > {min_gain_pct:.3g}%")
    else:
        how = f"{b:.1f} -> {c:.1f} us, {delta:+.3f}%; needs > {min_gain_pct:.3g}%"
    # slower beyond the floor, paired per launch only (an unpaired total has no bound: it stays a tie)
    lost = not kept and hi is not None and delta < -min_gain_pct and hi < -min_gain_pct
    why_not = _DISAGREE if suspect else "The script metric's small gain was noise"
    reason = (f"profiler GPU time of {names}: {how}" if kept else
              f"profiler GPU time of {names} is slower beyond {min_gain_pct:.3g}% ({how}; upper bound {hi:+.3f}%): "
              "not kept" if lost else
              f"the script metric improved but profiler GPU time of {names} did not by more than {min_gain_pct:.3g}% "
              f"({how}): not kept. {why_not}")
    code = (Code.GPU_TIME_WIN if kept else Code.GPU_TIME_LOSS if lost else
            Code.GPU_TIME_BELOW_FLOOR if delta > 0 else Code.GPU_TIME_NOT_IMPROVED)
    return KeepDecision(kept=kept, gpu_best_us=gpu_best_us, gpu_candidate_us=gpu_candidate_us, gpu_delta_pct=delta,
                        metric_used="profiler GPU time", reason=reason, code=code, lower_bound_pct=lo,
                        upper_bound_pct=hi)


_DISAGREE = ("When the script's timing and the GPU kernel time disagree, the timing missed GPU work (a side "
             "stream, a missing synchronize, an early return) or measured something other than the kernel")


def robust_paired_bound(best_us: list[float], candidate_us: list[float], confidence: float) -> tuple[float, int]:
    """One-sided lower bound (%) on the mean per-launch improvement, with a robust scale.

    Deltas d_i = (b_i - c_i) / b_i * 100. Scale: 1.4826 * MAD (the median absolute deviation,
    scaled to the SD of a normal distribution), so that a real win confined to some launches (one
    config class) is not mistaken for noise, as the plain SD would; bound = mean - t * scale / sqrt(n)
    with Student's t at `confidence`, n-1 df (scipy.stats.t). A heuristic robust t, not an exact test.
    Returns (bound, n).
    """
    from scipy.stats import t as student_t

    d = [(b - c) / b * 100.0 for b, c in zip(best_us, candidate_us, strict=True)]
    n, mean = len(d), sum(d) / len(d)
    med = statistics.median(d)
    scale = 1.4826 * statistics.median(abs(x - med) for x in d)
    return mean - float(student_t.ppf(confidence, n - 1)) * scale / math.sqrt(n), n


__all__ = ["SCRIPT_METRIC_WARNING", "KeepDecision", "apply_keep_metric", "robust_paired_bound"]
