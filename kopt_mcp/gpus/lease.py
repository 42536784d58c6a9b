"""Cross-process GPU leases: one lock file per GPU in a per-host directory.

`<lease_dir>/<uuid>.lock` is held with an OS file lock (flock through `filelock`), so the kernel
frees it when the holder dies; `<uuid>.json` beside it (written atomically) says who holds it.
The lock is the truth: a `.json` left by a dead holder means nothing while the lock is free.
`<uuid>.released.json` says when a kopt-mcp lease on that GPU was last given back (`released_at`):
for a moment after, the GPU still shows the finished job's utilization (kopt_mcp.gpus.gate).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

import filelock
from pydantic import BaseModel, Field

from kopt_mcp.gpus.base import GpuReading, Vendor

DEFAULT_LEASE_DIR = Path("/tmp/kopt-mcp-leases")


class Lease(BaseModel):
    """A device this process may use: `env` binds a child process to it (see `binding_env`).

    `lock_path` is the held lock file; "" for the CPU (nothing to lock).
    """

    vendor: Vendor
    index: int
    uuid: str
    name: str
    env: dict[str, str] = Field(default_factory=dict)
    lock_path: str = ""


def binding_env(vendor: Vendor, index: int) -> dict[str, str]:
    """Environment variables that make a child process see only device `index`.

    nvidia -> CUDA_VISIBLE_DEVICES=index. amd -> ROCR_VISIBLE_DEVICES=index, and
    HIP_VISIBLE_DEVICES=0 / CUDA_VISIBLE_DEVICES=0: ROCr filters first, HIP then counts from 0
    among what ROCr left, so repeating `index` there would hide the GPU. cpu -> {}.
    Raises ValueError for another vendor.
    """
    if vendor == "nvidia":
        return {"CUDA_VISIBLE_DEVICES": str(index)}
    if vendor == "amd":
        return {"ROCR_VISIBLE_DEVICES": str(index), "HIP_VISIBLE_DEVICES": "0",
                "CUDA_VISIBLE_DEVICES": "0"}
    if vendor == "cpu":
        return {}
    raise ValueError(f"unknown vendor {vendor!r}: expected nvidia, amd or cpu")


def default_lease_dir() -> Path:
    """`$KOPT_LEASE_DIR`, else /tmp/kopt-mcp-leases (one directory per host)."""
    env = os.environ.get("KOPT_LEASE_DIR")
    return Path(env) if env else DEFAULT_LEASE_DIR


_LOCK_KW: dict[str, object] = {"thread_local": False, "mode": 0o666}
if "fallback_to_soft" in inspect.signature(filelock.FileLock.__init__).parameters:
    _LOCK_KW["fallback_to_soft"] = False  # a soft lock would outlive a killed holder


def _safe(uuid: str) -> str:
    """A file-name-safe form of a GPU uuid."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", uuid) or "_"


class LeaseManager:
    """Takes and gives back GPU leases for this process, in `lease_dir`, labelled `tag`.

    `lease_dir` None -> `default_lease_dir()`. Created on first use (mode 1777, so other
    users on the host can lease too).
    """

    def __init__(self, lease_dir: Path | None = None, tag: str = "") -> None:
        self.lease_dir = Path(lease_dir) if lease_dir is not None else default_lease_dir()
        self.tag = tag
        self._held: dict[str, tuple[filelock.BaseFileLock, Lease]] = {}

    def lock_path(self, uuid: str) -> Path:
        """`<lease_dir>/<uuid>.lock`."""
        return self.lease_dir / f"{_safe(uuid)}.lock"

    def info_path(self, uuid: str) -> Path:
        """`<lease_dir>/<uuid>.json`, the sidecar naming the holder."""
        return self.lease_dir / f"{_safe(uuid)}.json"

    def released_path(self, uuid: str) -> Path:
        """`<lease_dir>/<uuid>.released.json`: when a kopt-mcp lease on the GPU was last given back."""
        return self.lease_dir / f"{_safe(uuid)}.released.json"

    def released_at(self, uuid: str) -> float | None:
        """When (epoch s, time.time()) a kopt-mcp lease on `uuid` was last given back on this host, or
        None (never, or unreadable)."""
        try:
            at = json.loads(self.released_path(uuid).read_text())["at"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return float(at) if isinstance(at, (int, float)) else None

    def _ensure_dir(self) -> None:
        if not self.lease_dir.is_dir():
            self.lease_dir.mkdir(parents=True, exist_ok=True)
            try:
                os.chmod(self.lease_dir, 0o1777)
            except OSError:
                pass

    def _try_lock(self, uuid: str) -> filelock.BaseFileLock | None:
        """One non-blocking attempt at the lock; the held lock or None when another holds it."""
        self._ensure_dir()
        lock = filelock.FileLock(str(self.lock_path(uuid)), timeout=0, **_LOCK_KW)
        try:
            lock.acquire(timeout=0)
        except filelock.Timeout:
            return None
        return lock

    def try_acquire(self, reading: GpuReading) -> Lease | None:
        """Lease `reading`'s GPU if no process holds it (one try, no waiting).

        Returns the Lease (the same one if this manager holds it already) or None when another
        holder has it. Raises OSError if the lease directory cannot be written.
        """
        if reading.uuid in self._held:
            return self._held[reading.uuid][1]
        lock = self._try_lock(reading.uuid)
        if lock is None:
            return None
        lease = Lease(vendor=reading.vendor, index=reading.index, uuid=reading.uuid,
                      name=reading.name, env=binding_env(reading.vendor, reading.index),
                      lock_path=str(self.lock_path(reading.uuid)))
        self._held[reading.uuid] = (lock, lease)
        self._write_info(reading)
        return lease

    def _write_info(self, reading: GpuReading) -> None:
        """Write the sidecar atomically (temp file + os.replace). Best effort: the lock rules."""
        info = {"pid": os.getpid(), "host": socket.gethostname(), "tag": self.tag,
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "uuid": reading.uuid, "index": reading.index}
        path = self.info_path(reading.uuid)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(info))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)

    def _read_info(self, uuid: str) -> dict | None:
        try:
            data = json.loads(self.info_path(uuid).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def holder(self, uuid: str) -> dict | None:
        """Who holds `uuid`'s lease: {"pid", "host", "tag", "since", ...}, or None when free.

        None whenever the lock is free, even if a stale .json from a dead holder remains.
        A held lock without a readable .json gives {"pid": None, "host": None, "tag": None,
        "since": None}. Probing takes and drops the free lock for an instant.
        """
        if uuid in self._held:
            return self._read_info(uuid) or {"pid": os.getpid(), "host": socket.gethostname(),
                                             "tag": self.tag, "since": None}
        lock = self._try_lock(uuid)
        if lock is not None:
            lock.release()
            return None
        return self._read_info(uuid) or {"pid": None, "host": None, "tag": None, "since": None}

    @property
    def held(self) -> list[Lease]:
        """The leases this manager holds now."""
        return [lease for _, lease in self._held.values()]

    def release(self, uuid: str | None = None) -> None:
        """Give back `uuid`'s lease, or every lease when None. Removes our .json. Never raises
        for a lease that is not held."""
        for u in [uuid] if uuid is not None else list(self._held):
            entry = self._held.pop(u, None)
            if entry is None:
                continue
            info = self._read_info(u)
            if info is not None and info.get("pid") == os.getpid():
                self.info_path(u).unlink(missing_ok=True)
            self._stamp_release(u)
            entry[0].release()

    def _stamp_release(self, uuid: str) -> None:
        """Write `<uuid>.released.json` ({"at": epoch s, "pid", "tag"}) atomically. Best effort."""
        path = self.released_path(uuid)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({"at": time.time(), "pid": os.getpid(), "tag": self.tag}))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
