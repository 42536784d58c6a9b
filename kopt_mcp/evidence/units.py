"""Harness units (pure data): one measurement unit of the benchmark's own harness in a profiled run."""

from __future__ import annotations

from collections.abc import Collection

from pydantic import BaseModel, Field


#: how the CUPTI injector labels a do_bench call that Triton's autotuner makes while it times each
#: config of an autotuned kernel (triton/runtime/autotuner.py: `Autotuner._bench` hands do_bench its
#: inner `kernel_call`); such calls run where the process has no autotuning result cached yet (the
#: first run of a tree: 7 extra units in flash-linear-attention's LayerNorm benchmark on an H200)
AUTOTUNER_LABEL = "Autotuner._bench."


class PersistingL2Report(BaseModel):
    """What the injector's persisting-L2 guard saw in the unit's process up to the unit's end
    (cupti_inject/kopt_l2.py): the largest persisting-L2 limit found as a unit began (bytes; the
    driver's default or the benchmark's, set to 0 then), the times the benchmark raised it during a
    unit, the guard's resets, and the benchmark's calls of the functions that set an access policy
    window or the limit, by name (CUPTI API callbacks; "cudaStreamSetAttribute": 3)."""

    limit_found: int = 0
    raised: int = 0
    resets: int = 0
    api: dict[str, int] = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list)


class HarnessUnit(BaseModel):
    """One measurement unit of the benchmark's own harness in one profiled run (a do_bench call, a
    torch.utils.benchmark Timer measurement, a pytest-benchmark case), in the harness's order
    (`index`, 0-based over the run's processes in the order they ran), with each kernel's GPU time
    per invocation of the timed function.

    `per_invocation[kernel][i]`: the GPU time (us) of kernel's launches in invocation i, summed;
    `launches[kernel][i]`: how many; invocations that launched no kernel are absent from both.
    `weights[i]`: statements in invocation i where the harness runs several per timed block
    (torch.utils.benchmark's `number`; absent: 1). `source`: "marked" (external correlation ids
    pushed around each invocation inside the process) or "segmented" (found in the launch stream
    afterwards: kopt_mcp/evidence/segment.py)."""

    index: int
    harness: str
    label: str = ""
    invocations: int = 0
    weights: dict[int, int] = Field(default_factory=dict)
    per_invocation: dict[str, dict[int, float]] = Field(default_factory=dict)
    launches: dict[str, dict[int, int]] = Field(default_factory=dict)
    source: str = "marked"
    #: launches made between two of the unit's invocations, outside both (no invocation's external id,
    #: host start in no window: a thread the timed call left running, work deferred past its window):
    #: kernel -> GPU time (us, summed) and launches
    between_us: dict[str, float] = Field(default_factory=dict)
    between_launches: dict[str, int] = Field(default_factory=dict)
    #: the injector's persisting-L2 guard (None: not run, an older trace, ncu)
    l2: PersistingL2Report | None = None

    def kernels(self) -> list[str]:
        """The kernel names launched inside this unit's invocations, in name order."""
        return sorted(self.per_invocation)

    def invocations_of(self, kernels: Collection[str]) -> list[int]:
        """The invocations (sorted) in which one of `kernels` launched."""
        return sorted({i for k in kernels for i in self.per_invocation.get(k, {})})

    def invocation_us(self, kernels: Collection[str], i: int) -> float:
        """The GPU time (us) of `kernels`' launches in invocation i, per statement (divided by weights[i])."""
        return sum(self.per_invocation.get(k, {}).get(i, 0.0) for k in kernels) / self.weights.get(i, 1)


def measured_units(units: list[HarnessUnit]) -> list[HarnessUnit]:
    """The units of the benchmark's own measurement: `units` without the autotuner's timing of its
    configs (AUTOTUNER_LABEL), which are not the harness's and run only where the autotuning result
    was not cached; indexed again from 0 in order (`index`: the k-th measured unit of the run)."""
    kept = [u for u in units if not u.label.startswith(AUTOTUNER_LABEL)]
    if len(kept) == len(units):
        return units
    return [u.model_copy(update={"index": i}) for i, u in enumerate(kept)]
