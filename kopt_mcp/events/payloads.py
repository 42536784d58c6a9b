"""Nested payloads of ledger events: dumps of other modules' models (a class's change, the keep
decision, the device, a kernel row, the bottleneck), typed on the fields readers use; their producers
own the full shape (`extra="allow"`). PerfRow is one row of performance.md (strict)."""

from __future__ import annotations

from pydantic import BaseModel

from kopt_mcp.events.base import _Payload


class PerfRow(BaseModel):
    """One row of performance.md. Metric and GPU time per class are joined into one cell."""

    date: str
    commit: str
    status: str
    command: str
    target: str
    kernel: str
    metric: str
    gpu_time: str
    change: str
    explanation: str


class ClassChange(_Payload):
    """One config class in a verdict (rules.script.ClassDelta dumped): metric of BEST and the
    candidate, change per round and its mean (%, + = better; None against a zero metric)."""

    key: str
    best: float | None = None
    candidate: float | None = None
    deltas_pct: list[float | None] = []
    mean_pct: float | None = None


class GpuKeep(_Payload):
    """The keep decision of an attempt (rules.keep_totals.KeepDecision dumped): GPU time (us) of BEST
    and the candidate, change in % (+ = better)."""

    kept: bool | None = None
    gpu_best_us: float | None = None
    gpu_candidate_us: float | None = None
    gpu_delta_pct: float | None = None
    metric_used: str | None = None
    reason: str = ""


class DeviceRecord(_Payload):
    """The device of the baseline (results.DeviceInfo dumped)."""

    vendor: str = ""
    index: int | None = None
    name: str = ""


class KernelLine(_Payload):
    """One kernel of a trace (hottest first): launches, GPU time (us), share of the run (%),
    registers per thread, shared memory per block (bytes); vendor metrics as extra fields."""

    name: str
    calls: int | None = None
    total_us: float | None = None
    avg_us: float | None = None
    median_us: float | None = None
    share_pct: float | None = None
    registers_per_thread: int | None = None
    shared_mem_per_block_bytes: int | None = None


class FunctionLine(_Payload):
    """One sampled Python function of a CPU trace (hottest first): where, and its self and total share
    of the samples (%)."""

    function: str
    file: str = ""
    line: int | None = None
    self_pct: float | None = None
    total_pct: float | None = None


class BottleneckRecord(_Payload):
    """The bottleneck class of a trace's target kernel (profilers.bottleneck.Bottleneck dumped)."""

    kind: str
    evidence: dict[str, float] = {}
    reason: str = ""


class FileChangeRecord(_Payload):
    """One file a run changed in its checkout (rules.protect.FileChange)."""

    kind: str
    path: str
