"""The availability gate over the AMD probes: busy reasons from recorded outputs, AMD leases."""

from __future__ import annotations

import pytest

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus.amd import (
    AMD_SMI_PROCESS_COMMAND,
    ROCM_SMI_GPU_COMMAND,
    ROCM_SMI_PIDS_COMMAND,
    AmdSmiCliProbe,
    RocmSmiProbe,
    SysfsProbe,
)
from kopt_mcp.gpus.gate import GpuGate, IdleThresholds
from kopt_mcp.gpus.lease import LeaseManager
from tests.gpus.test_amd_probes import (
    AMD_SMI_PROCS,
    BESZEL_JSON,
    MARIMO_JSON,
    MIB,
    NO_PIDS,
    PR120_MEMUSE,
    SHOWPIDS,
    Replay,
    fx,
    make_card,
)

TH = IdleThresholds()  # busy at >= 10 % or >= 2048 MiB


def _gate(tmp_path, fake_time, probe, th=TH, wait_s=1200.0, poll_s=600.0, tag="t"):
    return GpuGate(probe, LeaseManager(tmp_path / "leases", tag), th, wait_s=wait_s, poll_s=poll_s,
                   sleep=fake_time.sleep, clock=fake_time)


def _rocm(gpu_fixture, pids=NO_PIDS):
    return RocmSmiProbe(Replay({tuple(ROCM_SMI_GPU_COMMAND): fx(gpu_fixture),
                                tuple(ROCM_SMI_PIDS_COMMAND): pids}))


def test_idle_rx7900xt_is_leased_with_amd_binding(tmp_path, fake_time):
    out = _gate(tmp_path, fake_time, _rocm(MARIMO_JSON)).acquire()
    lease = out.lease
    assert lease is not None and out.polls == 1 and fake_time.slept == []
    assert (lease.vendor, lease.index, lease.uuid, lease.name) == ("amd", 0, "amd-gpu-0", "Radeon RX 7900 XT")
    assert lease.env == {"ROCR_VISIBLE_DEVICES": "0", "HIP_VISIBLE_DEVICES": "0",
                         "CUDA_VISIBLE_DEVICES": "0"}
    assert out.checks[0].busy == [] and out.checks[0].mem_used_mib == 27856896 / MIB


def test_rocm_smi_vram_over_threshold_is_busy_until_timeout(tmp_path, fake_time):
    # recorded 794341376 B (757.5 MiB) used, judged against a 512 MiB threshold
    out = _gate(tmp_path, fake_time, _rocm(BESZEL_JSON), th=IdleThresholds(mem_mib=512)).acquire()
    assert out.lease is None and out.polls == 3 and fake_time.slept == [600.0, 600.0]
    assert out.checks[0].busy == ["memory used 757.5 MiB >= 512 MiB"]
    # the gate's message is the product: it names what keeps each device busy
    assert out.reason == "no idle GPU after 1200 s: GPU 0: memory used 757.5 MiB >= 512 MiB"


def test_rocm_smi_single_gpu_with_a_kfd_process_is_busy(tmp_path, fake_time):
    # two recorded outputs of different machines replayed together (see test_amd_probes)
    out = _gate(tmp_path, fake_time, _rocm(MARIMO_JSON, fx(SHOWPIDS)), wait_s=0).acquire()
    assert out.lease is None
    assert out.checks[0].busy == ["1 compute process (pid 1168514 pt_main_thread, 169169.4 MiB)"]


def test_rocm_smi_unparsable_output_stops_the_gate_with_the_command(tmp_path, fake_time):
    with pytest.raises(ProbeError, match="rocm-smi --showuse.*'VRAM Total Used Memory"):
        _gate(tmp_path, fake_time, _rocm(PR120_MEMUSE)).acquire()


def _amd_cli(tmp_path, amd_smi_text, *cards):
    root = tmp_path / "drm"
    for n, (used_mib, busy) in enumerate(cards):
        make_card(root, n, used=int(used_mib * MIB), total=32624 * MIB, busy=busy,
                  bus=f"0000:{3 + n:02x}:00.0")
    return AmdSmiCliProbe(Replay({tuple(AMD_SMI_PROCESS_COMMAND): amd_smi_text}), SysfsProbe(root))


def test_amd_smi_processes_make_both_gpus_busy(tmp_path, fake_time):
    probe = _amd_cli(tmp_path, fx(AMD_SMI_PROCS), (40, 0), (40, 0))
    out = _gate(tmp_path, fake_time, probe, wait_s=0).acquire()
    assert out.lease is None and [c.uuid for c in out.checks] == ["0000:03:00.0", "0000:04:00.0"]
    for c in out.checks:
        assert c.busy == [("4 compute processes (pid 213534 /usr/bin/python3.12, 0.1 MiB; "
                           "pid 213890 /usr/bin/python3.12, 0.1 MiB; "
                           "pid 213952 /usr/bin/python3.12, 20035.7 MiB; "
                           "pid 213953 /usr/bin/python3.12, 19553.9 MiB)")]


def test_empty_amd_smi_process_list_is_not_idle_when_vram_is_used(tmp_path, fake_time):
    # amd-smi printed nothing, yet sysfs shows 20035 MiB used and 97 % busy on GPU 0: busy
    probe = _amd_cli(tmp_path, "", (20035, 97), (30, 0))
    out = _gate(tmp_path, fake_time, probe).acquire()
    assert out.checks[0].busy == ["utilization 97% >= 10%", "memory used 20035 MiB >= 2048 MiB"]
    assert (out.lease.index, out.lease.uuid) == (1, "0000:04:00.0")
    assert out.lease.env == {"ROCR_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0",
                             "CUDA_VISIBLE_DEVICES": "0"}


def test_own_pids_are_not_foreign_on_amd(tmp_path, fake_time):
    probe = _amd_cli(tmp_path, fx(AMD_SMI_PROCS), (40, 0), (40, 0))
    own = frozenset({213534, 213890, 213952, 213953})
    out = _gate(tmp_path, fake_time, probe).acquire(own_pids=own)
    assert (out.lease.vendor, out.lease.index) == ("amd", 0)


def test_two_gates_lease_different_amd_gpus(tmp_path, fake_time):
    root = tmp_path / "drm"
    make_card(root, 0, used=0, total=MIB, busy=0)
    make_card(root, 1, used=0, total=MIB, busy=0)
    ga = _gate(tmp_path, fake_time, SysfsProbe(root), tag="a")  # kept: its manager holds the lock
    a = ga.acquire()
    b = _gate(tmp_path, fake_time, SysfsProbe(root), tag="b", wait_s=0).acquire()
    assert (a.lease.uuid, b.lease.uuid) == ("amd-gpu-0", "amd-gpu-1")
    assert b.checks[0].busy[0].startswith("leased by kopt-mcp pid")
    assert b.lease.env["ROCR_VISIBLE_DEVICES"] == "1"
