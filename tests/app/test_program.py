"""program.md and the prompts name the device the session measures on: a CPU session is told what
kernel_trace_analysis gives there (py-spy functions) and what to do when it has nothing."""

from __future__ import annotations

import dataclasses

from kopt_mcp.app.program import TRACE_CPU, TRACE_GPU, TRACE_UNKNOWN, device_words, render_program
from kopt_mcp.app.prompts import research_directions
from kopt_mcp.results import DeviceInfo


def test_a_cpu_session_gets_the_cpu_trace_step_with_its_fallback(ref):
    assert ref.jobs.device.vendor == "cpu"  # the toy has gpu_probe = "none": the CPU is the device
    text = render_program(ref)
    assert TRACE_CPU in text and TRACE_GPU not in text
    assert "available: false" in TRACE_CPU and "go on to 3" in TRACE_CPU
    assert "- keep metric: the script metric (no kernel profiler on the CPU)" in text
    assert "$" not in text.split("## The loop")[1]  # every placeholder filled


def test_before_the_first_lease_the_probe_setting_decides_and_a_gpu_gets_the_gpu_step(toy_repo, make_referee,
                                                                                      monkeypatch):
    r = make_referee(toy_repo)
    assert r.jobs.device is None and device_words(r)[1] is TRACE_CPU  # gpu_probe = "none": never a GPU
    cfg = r.what.cfg.model_copy(update={"gates": r.what.cfg.gates.model_copy(update={"gpu_probe": "auto"})})
    monkeypatch.setattr(r, "what", dataclasses.replace(r.what, config=r.what.config.model_copy(update={"target": cfg})))
    assert device_words(r)[1] is TRACE_UNKNOWN
    monkeypatch.setattr(r.jobs, "device", DeviceInfo(vendor="nvidia", index=0, name="H100", env={}))
    line, step = device_words(r)
    assert step is TRACE_GPU and "H100" in line


def test_research_directions_show_the_cpu_functions_of_the_latest_trace(ref):
    ref.books.store.log("trace", backend="py-spy", functions=[
        {"function": "rms_norm_rows", "file": "kernel.py", "line": 9, "self_pct": 38.83, "total_pct": 78.16}])
    text = research_directions(ref)
    assert "| rms_norm_rows | kernel.py:9 | 38.83 | 78.16 |" in text
