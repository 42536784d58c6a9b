"""NvmlProbe and make_probe. Without a GPU only "no crash"; with one (-m gpu) real readings."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus import make_probe
from kopt_mcp.gpus.gate import GpuGate, IdleThresholds, busy_reasons
from kopt_mcp.gpus.lease import LeaseManager
from kopt_mcp.gpus.nvml import NvmlProbe
from tests.gpus.conftest import child_env

HAS_GPU = NvmlProbe.available()


def test_available_answers_a_bool_without_raising():
    assert NvmlProbe.available() in (True, False)


@pytest.mark.skipif(HAS_GPU, reason="NVML works here")
def test_read_without_nvml_names_the_failed_call():
    with pytest.raises(ProbeError, match="nvmlInit"):
        NvmlProbe().read()


def test_importing_the_package_does_not_import_pynvml():
    code = "import sys, kopt_mcp.gpus, kopt_mcp.gpus.nvml; print('pynvml' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=child_env()).stdout
    assert out.strip() == "False"


def test_make_probe_backends():
    assert make_probe("none").name == "none" and make_probe("none").read() == []
    assert make_probe("nvml").name == "nvml"
    assert make_probe("nvidia-smi").name == "nvidia-smi"
    with pytest.raises(ValueError, match="auto, nvml, nvidia-smi, none"):
        make_probe("rocm")


@pytest.mark.skipif(HAS_GPU, reason="auto would pick nvml here")
def test_auto_without_nvml_or_nvidia_smi_is_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert make_probe("auto").name == "none"


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU with NVML")
def test_real_gpus_agree_with_nvidia_smi(tmp_path):
    gpus = NvmlProbe().read()
    assert gpus and make_probe("auto").name == "nvml"
    for g in gpus:
        assert g.uuid.startswith("GPU-") and g.name and g.vendor == "nvidia"
        assert g.mem_total_mib > 1024 and 0 <= g.mem_used_mib <= g.mem_total_mib
        assert g.util_pct is None or 0 <= g.util_pct <= 100
    smi = make_probe("nvidia-smi").read()
    assert [(s.index, s.uuid) for s in smi] == [(g.index, g.uuid) for g in gpus]
    for s, g in zip(smi, gpus):
        assert abs(s.mem_total_mib - g.mem_total_mib) <= 1.0
    out = GpuGate(NvmlProbe(), LeaseManager(tmp_path, "gpu-test"), IdleThresholds(), wait_s=0,
                  poll_s=1).acquire()
    if out.lease is not None:
        assert out.lease.env == {"CUDA_VISIBLE_DEVICES": str(out.lease.index)}
        assert Path(out.lease.lock_path).exists()
    else:
        # the gate's message is the product: it names what keeps each device busy
        assert out.reason.startswith("no idle GPU after 0 s: GPU ")


BUSY_CHILD = """
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
print("ready", flush=True)
t = time.time()
while time.time() - t < 60:
    b = a @ a
    torch.cuda.synchronize()
"""


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_GPU, reason="needs an NVIDIA GPU with NVML")
def test_real_busy_gpu_is_refused_unless_the_process_is_ours(tmp_path):
    pytest.importorskip("torch")
    child = subprocess.Popen([sys.executable, "-c", BUSY_CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        g = None
        for _ in range(60):  # NVML lists the process once its context exists
            g = next((r for r in NvmlProbe().read() if any(p.pid == child.pid for p in r.processes)),
                     None)
            if g is not None:
                break
            time.sleep(0.5)
        assert g is not None, "NVML never showed the child's compute process"
        dev = g.index
        reasons = busy_reasons(g, IdleThresholds())
        assert any(r.startswith("1 compute process (pid " + str(child.pid)) for r in reasons), reasons
        assert not any("compute process" in r
                       for r in busy_reasons(g, IdleThresholds(), frozenset({child.pid})))
        loose = IdleThresholds(util_pct=101, mem_mib=1e9)  # only processes count
        gate = GpuGate(NvmlProbe(), LeaseManager(tmp_path, "t"), loose, wait_s=0, poll_s=1)
        out = gate.acquire()
        assert out.lease is None or out.lease.index != dev
        out = gate.acquire(own_pids=frozenset({child.pid}))
        assert out.lease is not None
    finally:
        child.kill()
        child.wait(timeout=30)
