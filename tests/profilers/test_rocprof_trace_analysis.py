"""kernel_trace_analysis with the rocprofv3 backend on a recorded trace: the report carries the
target kernel's bottleneck class."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from kopt_mcp.profilers.rocprof import RocprofV3Profiler

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "rocprofv3" / "rocprofiler_sdk_docs_kernel_trace.csv"


class ReplayRocprof(RocprofV3Profiler):
    """Runs the benchmark as is, then leaves the recorded rocprofv3 trace where rocprofv3 would."""

    def wrap(self, command: str, out_dir: Path) -> str:
        dest = Path(out_dir) / "host" / "4242" / "run_kernel_trace.csv"
        return (f"{command} && mkdir -p {shlex.quote(str(dest.parent))} && "
                f"cp {shlex.quote(str(FIXTURE))} {shlex.quote(str(dest))}")


def with_regex(ref, monkeypatch, regex: str) -> None:
    """The session's (frozen) config with `[profiler] kernel = regex`."""
    profiler = ref.what.cfg.profiler.model_copy(update={"kernel": regex})
    cfg = ref.what.cfg.model_copy(update={"profiler": profiler})
    monkeypatch.setattr(ref, "what", dataclasses.replace(ref.what, config=ref.what.config.model_copy(update={"target": cfg})))


def test_trace_analysis_fills_bottleneck_for_hottest(ref, monkeypatch):
    monkeypatch.setattr(ref, "profiler", lambda detail=False: ReplayRocprof())
    result = ref.kernel_trace_analysis()
    assert result.backend == "rocprofv3" and result.available
    assert result.target_kernels == ["void addition_kernel<float>(float*, float const*, float const*, int, int)"]
    assert result.bottleneck is not None and result.bottleneck.kind == "unknown"
    assert result.bottleneck.evidence["arch_vgpr"] == 8.0


def test_trace_analysis_bottleneck_follows_the_regex(ref, monkeypatch):
    monkeypatch.setattr(ref, "profiler", lambda detail=False: ReplayRocprof())
    with_regex(ref, monkeypatch, "divide")
    result = ref.kernel_trace_analysis()
    assert result.target_kernels[0].startswith("divide_kernel")
    assert result.bottleneck.evidence["accum_vgpr"] == 4.0


def test_trace_analysis_no_match_has_no_bottleneck(ref, monkeypatch):
    monkeypatch.setattr(ref, "profiler", lambda detail=False: ReplayRocprof())
    with_regex(ref, monkeypatch, "no_such_kernel")
    result = ref.kernel_trace_analysis()
    assert result.target_kernels == [] and result.bottleneck is None
    assert any("no kernel matches" in n for n in result.notes)
