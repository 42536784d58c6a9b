"""Cross-process GPU leases, with real second processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_mcp.gpus.base import GpuReading
from kopt_mcp.gpus.lease import Lease, LeaseManager, binding_env, default_lease_dir
from tests.gpus.conftest import child_env

UUID = "GPU-12d4823c-c93c-be36-630b-84be7a395e90"
READING = GpuReading(index=3, uuid=UUID, name="NVIDIA H200", vendor="nvidia")

CHILD = """
import sys, time
from pathlib import Path
from kopt_mcp.gpus.base import GpuReading
from kopt_mcp.gpus.lease import LeaseManager
m = LeaseManager(Path(sys.argv[1]), "child")
lease = m.try_acquire(GpuReading(index=3, uuid=sys.argv[2], name="x", vendor="nvidia"))
print("acquired" if lease else "refused", flush=True)
if lease is not None and sys.argv[3] == "hold":
    time.sleep(600)
"""


def _child(lease_dir: Path, mode: str) -> subprocess.Popen:
    env = child_env()
    return subprocess.Popen([sys.executable, "-c", CHILD, str(lease_dir), UUID, mode],
                            stdout=subprocess.PIPE, text=True, env=env)


@pytest.fixture
def holder_proc(tmp_path):
    """A second process that holds the lease on UUID until killed."""
    proc = _child(tmp_path, "hold")
    try:
        assert proc.stdout.readline().strip() == "acquired"
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_second_process_cannot_take_a_held_gpu(tmp_path, holder_proc):
    mine = LeaseManager(tmp_path, "parent")
    assert mine.try_acquire(READING) is None
    h = mine.holder(UUID)
    assert h["pid"] == holder_proc.pid and h["tag"] == "child" and h["since"]


def test_killed_holder_lease_is_reclaimable(tmp_path, holder_proc):
    mine = LeaseManager(tmp_path, "parent")
    assert mine.try_acquire(READING) is None
    os.kill(holder_proc.pid, signal.SIGKILL)
    holder_proc.wait(timeout=30)
    assert json.loads(mine.info_path(UUID).read_text())["pid"] == holder_proc.pid  # stale json
    assert mine.holder(UUID) is None  # ... means nothing: the lock is free
    lease = mine.try_acquire(READING)
    assert lease is not None and lease.lock_path == str(tmp_path / f"{UUID}.lock")
    assert mine.holder(UUID)["pid"] == os.getpid()


def test_child_is_refused_while_we_hold_then_served_after_release(tmp_path):
    mine = LeaseManager(tmp_path, "parent")
    lease = mine.try_acquire(READING)
    assert lease == Lease(vendor="nvidia", index=3, uuid=UUID, name="NVIDIA H200",
                          env={"CUDA_VISIBLE_DEVICES": "3"}, lock_path=str(tmp_path / f"{UUID}.lock"))
    out = _child(tmp_path, "once").communicate(timeout=60)[0]
    assert out.strip() == "refused"
    mine.release()
    assert not mine.info_path(UUID).exists() and mine.held == []
    assert _child(tmp_path, "once").communicate(timeout=60)[0].strip() == "acquired"


def test_two_managers_in_one_process_exclude_each_other(tmp_path):
    a, b = LeaseManager(tmp_path, "a"), LeaseManager(tmp_path, "b")
    assert a.try_acquire(READING) is not None
    assert a.try_acquire(READING) is a.held[0]  # taking it again is a no-op
    assert b.try_acquire(READING) is None
    assert b.holder(UUID)["tag"] == "a"
    a.release(UUID)
    assert b.holder(UUID) is None and b.try_acquire(READING) is not None


def test_default_lease_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("KOPT_LEASE_DIR", raising=False)
    assert default_lease_dir() == Path("/tmp/kopt-mcp-leases")
    monkeypatch.setenv("KOPT_LEASE_DIR", str(tmp_path / "x"))
    assert default_lease_dir() == tmp_path / "x"
    assert LeaseManager(tag="t").lease_dir == tmp_path / "x"


def test_binding_env():
    assert binding_env("nvidia", 5) == {"CUDA_VISIBLE_DEVICES": "5"}
    # ROCr filters to the one GPU first; HIP/CUDA then count from 0 among what is left
    assert binding_env("amd", 5) == {"ROCR_VISIBLE_DEVICES": "5", "HIP_VISIBLE_DEVICES": "0",
                                     "CUDA_VISIBLE_DEVICES": "0"}
    assert binding_env("cpu", -1) == {}
    with pytest.raises(ValueError):
        binding_env("intel", 0)  # type: ignore[arg-type]
