"""Bottleneck class of one kernel, from what its profiler reported (KernelStat.extra).

These are heuristics, not measurements of the limiter. The idea is the roofline one: the unit
running nearest its peak is the limiter. NVIDIA: Nsight Compute's "GPU Speed Of Light Throughput"
section compares Compute (SM) throughput with memory throughput, each as % of peak
(https://docs.nvidia.com/nsight-compute/ProfilingGuide/index.html, "Sections and Rules"), and its
SOL rule says "Achieved compute throughput and/or memory bandwidth below 60.0% of peak typically
indicate latency issues" (ncu's rule message, as quoted in real ncu reports) - hence 60%.

CPU: a py-spy sampling profile (profilers/pyspy.py) has no hardware counters either: it says where
the time goes, not what limits it. Its class is "cpu-bound" (the CPU runs the benchmark's Python
and the native code it calls), and the evidence says how the samples split between the
repository's own lines, libraries' Python code and imports, with the hottest own function.

AMD: a rocprofv3 kernel trace has no throughput counters, only the kernel's resources (VGPR,
AGPR, SGPR, LDS, scratch). From those alone we can say "register spills" (scratch in use) or
"occupancy-limited" (many VGPRs); otherwise the class is "unknown", and the reason names the
counters that would decide.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from kopt_mcp.evidence.trace import CpuProfile, KernelStat

__all__ = [
    "AMD_HIGH_LDS_BYTES",
    "AMD_HIGH_VGPR",
    "AMD_MAX_WAVES_PER_SIMD",
    "AMD_VGPRS_PER_SIMD_LANE",
    "AMD_VGPR_GRANULE",
    "BOUND_PCT",
    "LOW_OCCUPANCY_PCT",
    "Bottleneck",
    "BottleneckKind",
    "classify",
    "classify_cpu",
]

BottleneckKind = Literal["memory-bound", "compute-bound", "latency/occupancy-bound", "cpu-bound", "unknown"]

#: A unit is "the limiter" when its throughput is at least this % of peak and above the other
#: unit's (heuristic; Nsight Compute's SOL rule calls < 60% on both "latency issues").
BOUND_PCT = 60.0
#: Achieved occupancy (% of the SM's max warps) under which we call occupancy low (heuristic).
LOW_OCCUPANCY_PCT = 50.0
#: AMD CDNA: per-lane VGPRs (arch + accum, unified file on gfx90a/gfx942) above which a SIMD
#: holds at most half its waves (512 // 128 = 4 of 8). Heuristic threshold.
AMD_HIGH_VGPR = 128
#: AMD CDNA (gfx90a / gfx942) hardware figures used for the wave estimate: at most 8 waves per
#: SIMD (llvm-calc-occupancy docs for gfx90a: "Max waves/EU: 8"), 512 unified VGPRs per lane,
#: allocated in granules of 8. Other AMD GPUs differ: the estimate is a hint, not a measurement.
AMD_MAX_WAVES_PER_SIMD = 8
AMD_VGPRS_PER_SIMD_LANE = 512
AMD_VGPR_GRANULE = 8
#: LDS per workgroup above which at most 2 workgroups fit a 64 KiB-LDS CU (MI200/MI300); heuristic.
AMD_HIGH_LDS_BYTES = 32 * 1024

_NV_LIMITS = {
    "occupancy_limit_registers": "registers",
    "occupancy_limit_shared_mem": "shared memory",
    "occupancy_limit_warps": "warps",
    "occupancy_limit_blocks": "blocks",
}
_AMD_KEYS = ("arch_vgpr", "accum_vgpr", "sgpr", "lds_bytes", "scratch_bytes")
_AMD_DECIDERS = (
    "rocprofv3 --kernel-trace has no throughput counters; what decides is memory traffic vs "
    "VALU/MFMA activity per kernel time, collected with rocprofv3 --pmc (names per GPU: "
    "rocprofv3-avail list --pmc; e.g. SQ_WAVES, SQ_INSTS_VALU) or rocprofiler-compute's "
    "Speed-of-Light panel"
)


class Bottleneck(BaseModel):
    """What limits a kernel, the numbers behind the call, and the reasoning in one sentence."""

    kind: BottleneckKind
    evidence: dict[str, float] = Field(default_factory=dict)
    reason: str


def classify(kernel: KernelStat) -> Bottleneck:
    """Classify `kernel` from its profiler metrics: NVIDIA (ncu detail metrics) when SM and DRAM
    throughput are present, AMD (rocprofv3 resources) when register/LDS/scratch figures are,
    else "unknown"."""
    extra = kernel.extra
    if "sm_throughput_pct" in extra and "dram_throughput_pct" in extra:
        return _classify_nvidia(extra)
    if any(k in extra for k in _AMD_KEYS):
        return _classify_amd(extra)
    return Bottleneck(kind="unknown", evidence={}, reason=(
        "no throughput metrics for this kernel: profile in detail mode (ncu: "
        "sm__throughput / dram__throughput .avg.pct_of_peak_sustained_elapsed; AMD: register, "
        "LDS and scratch from rocprofv3 --kernel-trace, throughput from rocprofv3 --pmc)"))


def _classify_nvidia(extra: dict[str, float]) -> Bottleneck:
    sm, dram = extra["sm_throughput_pct"], extra["dram_throughput_pct"]
    keys = ("sm_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct", *_NV_LIMITS)
    evidence = {k: extra[k] for k in keys if k in extra}
    if dram >= BOUND_PCT and dram >= sm:
        return Bottleneck(kind="memory-bound", evidence=evidence, reason=(
            f"DRAM throughput {dram:.1f}% of peak >= {BOUND_PCT:.0f}% and above SM throughput "
            f"{sm:.1f}%: the memory system is the unit nearest its peak"))
    if sm >= BOUND_PCT and sm > dram:
        return Bottleneck(kind="compute-bound", evidence=evidence, reason=(
            f"SM throughput {sm:.1f}% of peak >= {BOUND_PCT:.0f}% and above DRAM throughput "
            f"{dram:.1f}%: the SMs are the unit nearest their peak"))
    reason = (f"SM {sm:.1f}% and DRAM {dram:.1f}% of peak, both below {BOUND_PCT:.0f}%: "
              f"neither unit is saturated, so latency (stalls, too little parallel work) limits")
    return Bottleneck(kind="latency/occupancy-bound", evidence=evidence,
                      reason=reason + _occupancy_note(extra))


def _occupancy_note(extra: dict[str, float]) -> str:
    """Name the occupancy limiter: the resource allowing the fewest blocks per SM."""
    limits = {label: extra[key] for key, label in _NV_LIMITS.items() if key in extra}
    occ = extra.get("achieved_occupancy_pct")
    occ_text = f"; achieved occupancy {occ:.1f}%" if occ is not None else ""
    if not limits:
        return occ_text
    low = min(limits.values())
    limiters = [label for label, v in limits.items() if v == low]
    if "warps" in limiters or "blocks" in limiters:
        return (f"{occ_text}; occupancy limiter: {' and '.join(limiters)} ({low:.0f} blocks/SM), "
                f"i.e. theoretical occupancy is already at the SM's hardware warp/block maximum")
    low_occ = occ is not None and occ < LOW_OCCUPANCY_PCT
    return (f"{occ_text}{' (low)' if low_occ else ''}; occupancy limiter: {' and '.join(limiters)} "
            f"({low:.0f} blocks/SM)")


def _classify_amd(extra: dict[str, float]) -> Bottleneck:
    evidence = {k: extra[k] for k in _AMD_KEYS if k in extra}
    vgpr = extra.get("arch_vgpr", 0.0) + extra.get("accum_vgpr", 0.0)
    if "arch_vgpr" in extra or "accum_vgpr" in extra:
        granules = -(-max(vgpr, 1.0) // AMD_VGPR_GRANULE) * AMD_VGPR_GRANULE
        waves = min(AMD_MAX_WAVES_PER_SIMD, int(AMD_VGPRS_PER_SIMD_LANE // granules))
        evidence["vgpr_total"] = vgpr
        evidence["est_waves_per_simd_by_vgpr"] = float(waves)
    scratch = extra.get("scratch_bytes", 0.0)
    if scratch > 0:
        return Bottleneck(kind="latency/occupancy-bound", evidence=evidence, reason=(
            f"scratch (private segment) {scratch:.0f} bytes > 0: registers spill to scratch "
            f"memory (slow, high-latency accesses); cut register pressure"))
    if vgpr > AMD_HIGH_VGPR:
        return Bottleneck(kind="latency/occupancy-bound", evidence=evidence, reason=(
            f"{vgpr:.0f} VGPRs per lane (arch + accum) > {AMD_HIGH_VGPR}: about "
            f"{evidence['est_waves_per_simd_by_vgpr']:.0f} of {AMD_MAX_WAVES_PER_SIMD} waves per "
            f"SIMD on CDNA, too few to hide memory latency; VGPRs limit occupancy"))
    lds = extra.get("lds_bytes", 0.0)
    if lds > AMD_HIGH_LDS_BYTES:
        return Bottleneck(kind="latency/occupancy-bound", evidence=evidence, reason=(
            f"LDS {lds:.0f} bytes per workgroup > {AMD_HIGH_LDS_BYTES}: few workgroups fit a CU; "
            f"LDS limits occupancy"))
    vgpr_text = (f"{vgpr:.0f} VGPRs <= {AMD_HIGH_VGPR}" if "vgpr_total" in evidence
                 else "VGPR count not in the trace")
    scratch_text = "no spills (scratch 0)" if "scratch_bytes" in extra else "scratch size not in the trace"
    return Bottleneck(kind="unknown", evidence=evidence, reason=(
        f"{scratch_text}, {vgpr_text} and LDS <= "
        f"{AMD_HIGH_LDS_BYTES} bytes: resources do not limit occupancy; memory- vs compute-bound "
        f"cannot be told from a kernel trace. {_AMD_DECIDERS}"))


def classify_cpu(profile: CpuProfile) -> Bottleneck:
    """The class of a sampled CPU run ("cpu-bound"; module docstring): evidence in % of all samples
    (own_pct, library_pct, harness_pct, import_pct, no_python_pct; the hottest own function's self
    and total share and its self samples), the reason naming that function and where the rest went.
    A protected file's function (the benchmark, the reference) is never the hottest own function."""
    evidence = {"own_pct": profile.own_pct, "library_pct": profile.library_pct,
                "import_pct": profile.import_pct, "no_python_pct": profile.no_python_pct,
                "harness_pct": profile.harness_pct, "samples": profile.samples, "runs": profile.runs}
    own = [f for f in profile.functions if f.own and not f.harness and f.function != "<module>" and f.self_pct > 0]
    hot = max(own, key=lambda f: f.self_pct, default=None)
    runs = f" of {profile.runs} runs" if profile.runs > 1 else ""
    parts = [f"{profile.own_pct:.0f}% of {profile.samples} samples{runs} ran the repository's own lines, "
             f"{profile.library_pct:.0f}% libraries' Python code (their native calls included), "
             f"{profile.harness_pct:.0f}% the protected harness (benchmark, reference), "
             f"{profile.import_pct:.0f}% imports"]
    if hot is not None:
        evidence |= {"hottest_own_self_pct": hot.self_pct, "hottest_own_total_pct": hot.total_pct,
                     "hottest_own_self_samples": hot.self_samples}
        parts.append(f"hottest own function {hot.function} ({hot.file}:{hot.line}): {hot.self_pct:.0f}% in its "
                     f"own lines ({hot.self_samples} samples), {hot.total_pct:.0f}% with what it calls")
    parts.append("a sampling profile says where the time goes, not what limits it")
    return Bottleneck(kind="cpu-bound", evidence=evidence, reason="; ".join(parts))
