"""Speed of light at the out-of-process confirmation (pure; issue 38 item 3).

Evidence: the target's DRAM traffic and GPU time measured by ncu as the benchmark's parent
(evidence/confirm.py TargetTime: `gbps`, `dram_bytes`, `unit_bytes`, `peak_gbps`,
`persisting_l2_bytes`), BEST's and the candidate's.

Rule (`judge_light`):

1. Beyond the speed of light: the candidate's achieved DRAM bandwidth over BEST_MARGIN x the device's
   peak (bus width x memory clock x 2, evidence/peak.py) -> beyond_speed_of_light (llm.c reported
   3530 GB/s on an L40S, 864 GB/s peak, with a persisting L2 window).
2. Too few bytes: in a harness unit where BEST moved at least MIN_BYTES (64 MiB) per invocation, the candidate
   moved under BYTES_SHARE of BEST's (a kernel launched every invocation that exits early on a cached
   flag; results kept in L2) -> too_few_bytes. Without units, the same on bytes per step.
3. Persisting L2: the candidate's target launches ran with a larger persisting-L2 set-aside than
   BEST's (ncu's launch__persisting_l2_cache_size) -> persisting_l2.
4. Beyond the FLOP peak (where ncu counted floating-point work: `[profiler] confirm_flops`): on a math
   path (fp32, fp16, fp64 on the CUDA cores; the tensor cores per source type), the candidate's target
   ran faster than BEST_MARGIN x that path's peak at the SM clock it ran at -> beyond_speed_of_light
   (profilers/ncu_flops.py: the counters, the peaks, what they were on an H200).

Else passes, with the candidate's % of the DRAM peak (None where ncu measured no DRAM bytes or the peak
is unknown: an older command line, rocprofv3) and, with FLOP counters, its % of the peak of the math path
it came closest to.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from kopt_mcp.evidence.confirm import TargetTime
from kopt_mcp.rules.decision import Code

#: measured bandwidth over this multiple of the peak is beyond it (ncu's counters and clocks read a few % apart)
BEST_MARGIN = 1.05
#: the candidate moving under this share of BEST's DRAM bytes for the same unit did not do the work. A
#: profitable early exit moves next to nothing (a flag; 2% in the stand-in test); an honest fusion that stops
#: materializing an intermediate can cut a target's traffic several-fold (1/5 is tested as kept), so the
#: share stays low: 1/10
BYTES_SHARE = 0.10
#: ... where BEST moved at least this much per invocation (bytes): more than the L2 of an H100 (50 MB) or an
#: H200 (60 MiB, ncu's device__attribute_l2_cache_size), so a working set that an honest change made fit in L2
#: (its DRAM bytes then fall toward zero under ncu's serialized launches) is never judged by its bytes
MIN_BYTES = 64 * 1024 * 1024


class LightCheck(BaseModel):
    """The speed-of-light check: `code` None where it passes (else beyond_speed_of_light,
    too_few_bytes or persisting_l2), `reason` with the figures, the candidate's achieved bandwidth
    (GB/s), the peak (GB/s) and its % of peak, and the units flagged for too few bytes."""

    code: Code | None = None
    reason: str = ""
    gbps: float | None = None
    peak_gbps: float | None = None
    pct_of_peak: float | None = None
    units: list[int] = Field(default_factory=list)
    #: with FLOP counters: the math path nearest its peak, its rate and peak (operations per second), the %
    flop_path: str | None = None
    flop_rate: float | None = None
    flop_peak: float | None = None
    pct_of_flop_peak: float | None = None

    def shown(self) -> str:
        """"3,212 GB/s, 66.7% of the 4,814 GB/s DRAM peak; fp32 51.1 TFLOP/s, 76.5% of its 66.7 TFLOP/s
        peak", either part alone, or "" where neither was measured."""
        parts = []
        if self.pct_of_peak is not None:
            parts.append(f"{self.gbps:,.0f} GB/s, {self.pct_of_peak:.1f}% of the {self.peak_gbps:,.0f} GB/s DRAM peak")
        if self.pct_of_flop_peak is not None:
            parts.append(f"{self.flop_path} {self.flop_rate / 1e12:,.1f} TFLOP/s, {self.pct_of_flop_peak:.1f}% of its "
                         f"{self.flop_peak / 1e12:,.1f} TFLOP/s peak")
        return "; ".join(parts)


def _nearest_flop_peak(cand: TargetTime) -> dict:
    """LightCheck's FLOP fields: the candidate's math path with the highest % of its peak; {} without one."""
    shares = [(r / cand.flop_peaks[p] * 100.0, p) for p, r in cand.flop_rates.items() if cand.flop_peaks.get(p)]
    if not shares:
        return {}
    pct, path = max(shares)
    return {"flop_path": path, "flop_rate": cand.flop_rates[path], "flop_peak": cand.flop_peaks[path],
            "pct_of_flop_peak": pct}


def _few(best: TargetTime, cand: TargetTime) -> list[tuple[str, float, float]]:
    """(where, BEST's bytes, the candidate's) for each unit (or the step) under BYTES_SHARE of BEST's."""
    if best.unit_bytes and cand.unit_bytes:
        pairs = [(f"unit {k + 1}", b, cand.unit_bytes.get(k, 0.0)) for k, b in sorted(best.unit_bytes.items())]
    elif best.dram_bytes is not None and cand.dram_bytes is not None:
        pairs = [("per step", best.dram_bytes, cand.dram_bytes)]
    else:
        pairs = []
    return [(w, b, c) for w, b, c in pairs if b >= MIN_BYTES and c < BYTES_SHARE * b]


def judge_light(best: TargetTime, cand: TargetTime) -> LightCheck:
    """The rule (module docstring) over BEST's and the candidate's out-of-process measurements. Never raises."""
    peak = cand.peak_gbps or best.peak_gbps
    pct = cand.gbps / peak * 100.0 if peak and cand.gbps is not None else None
    base = {"gbps": cand.gbps, "peak_gbps": peak, "pct_of_peak": pct, **_nearest_flop_peak(cand)}
    if pct is not None and pct > BEST_MARGIN * 100.0:
        return LightCheck(code=Code.BEYOND_SPEED_OF_LIGHT, **base, reason=(
            f"beyond the speed of light: the candidate's target moved DRAM data at {cand.gbps:,.0f} GB/s, {pct:.0f}% "
            f"of the device's {peak:,.0f} GB/s peak ({cand.peak_source or best.peak_source}); BEST "
            f"{best.gbps or 0:,.0f} GB/s: no kernel outruns its memory; the time or the traffic is not real"))
    flop_pct = base.get("pct_of_flop_peak")
    if flop_pct is not None and flop_pct > BEST_MARGIN * 100.0:
        return LightCheck(code=Code.BEYOND_SPEED_OF_LIGHT, **base, reason=(
            f"beyond the speed of light: the candidate's target ran {base['flop_path']} math at "
            f"{base['flop_rate'] / 1e12:,.1f} TFLOP/s, {flop_pct:.0f}% of that path's {base['flop_peak'] / 1e12:,.1f} "
            "TFLOP/s peak at the SM clock it ran at (ncu's counters and peak): no kernel outruns its math units; the "
            "time or the work counted is not real"))
    few = _few(best, cand)
    if few:
        shown = "; ".join(f"{w}: {c / 1e6:.2f} MB vs BEST's {b / 1e6:.2f} MB ({c / b * 100:.1f}%)" for w, b, c in few[:4])
        return LightCheck(code=Code.TOO_FEW_BYTES, **base, units=[int(w.split()[1]) - 1 for w, _, _ in few
                                                                   if w.startswith("unit")], reason=(
            f"too few bytes moved: {shown}, under {BYTES_SHARE:.0%} of BEST's DRAM traffic per invocation: the "
            "operation must read its inputs and write its outputs; a kernel that exits early or finds its result "
            "cached does not"))
    if (cand.persisting_l2_bytes or 0) > (best.persisting_l2_bytes or 0):
        return LightCheck(code=Code.PERSISTING_L2, **base, reason=(
            f"persisting L2: the candidate's target launches ran with {cand.persisting_l2_bytes / 2**20:.1f} MiB of "
            f"L2 set aside for persisting lines, BEST's with {(best.persisting_l2_bytes or 0) / 2**20:.1f} MiB: data "
            "kept in L2 across the harness's cache flush is not a faster kernel"))
    return LightCheck(**base)


__all__ = ["BEST_MARGIN", "BYTES_SHARE", "MIN_BYTES", "LightCheck", "judge_light"]
