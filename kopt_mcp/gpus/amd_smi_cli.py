"""AMD probe over the `amd-smi` CLI (process list) joined with sysfs counters."""

from __future__ import annotations

import json
from collections.abc import Callable

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus.amd_common import _MIB, _NA, _UNIT_BYTES, _cmd, _number
from kopt_mcp.gpus.amd_sysfs import SysfsProbe
from kopt_mcp.gpus.base import GpuProcess, GpuReading
from kopt_mcp.gpus.smi import _default_run

AMD_SMI_PROCESS_COMMAND = ["amd-smi", "process", "--json"]


def parse_amd_smi_process(text: str, cmd: list[str] | None = None) -> dict[int, list[GpuProcess]]:
    """Parse `amd-smi process --json` into {gpu index: processes}, de-duplicated by PID per GPU.

    Schema (tests/fixtures/amd_smi): a list of {"gpu": i, "process_list": [{"process_info":
    {"name", "pid", "memory_usage": {"vram_mem": {"value", "unit"}}, ...}}]}. `used_mib` is
    vram_mem. A `process_info` that is not an object (a message in place of a process) is
    skipped. Empty output -> {} (amd-smi may print nothing when it sees no process; that is
    not read as "idle", see AmdSmiCliProbe). Raises ProbeError naming `cmd` and the missing key.
    """
    cmd = cmd or AMD_SMI_PROCESS_COMMAND
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProbeError(f"`{_cmd(cmd)}` printed invalid JSON: {e}") from e
    if not isinstance(data, list):
        raise ProbeError(f"`{_cmd(cmd)}`: expected a JSON list of {{'gpu', 'process_list'}} "
                         f"entries, got {type(data).__name__}")
    out: dict[int, list[GpuProcess]] = {}
    for n, entry in enumerate(data):
        if not isinstance(entry, dict) or "gpu" not in entry:
            raise ProbeError(f"`{_cmd(cmd)}`: entry {n} has no 'gpu'")
        if not isinstance(entry["gpu"], int):
            raise ProbeError(f"`{_cmd(cmd)}`: entry {n} 'gpu' is not an index: {entry['gpu']!r}")
        procs = out.setdefault(entry["gpu"], [])
        plist = entry.get("process_list")
        if plist is None:
            raise ProbeError(f"`{_cmd(cmd)}`: entry {n} (gpu {entry['gpu']}) has no 'process_list'")
        seen = {p.pid for p in procs}
        for item in plist if isinstance(plist, list) else []:
            info = item.get("process_info") if isinstance(item, dict) else None
            if not isinstance(info, dict):
                continue
            if "pid" not in info:
                raise ProbeError(f"`{_cmd(cmd)}`: gpu {entry['gpu']}: a process_info has no 'pid'")
            try:
                pid = int(info["pid"])
            except (TypeError, ValueError) as e:
                raise ProbeError(f"`{_cmd(cmd)}`: gpu {entry['gpu']}: 'pid' is not a number: "
                                 f"{info['pid']!r}") from e
            if pid in seen:
                continue
            seen.add(pid)
            vram = (info.get("memory_usage") or {}).get("vram_mem")
            used = None
            if isinstance(vram, dict) and vram.get("unit") in _UNIT_BYTES:
                try:
                    v = _number(vram.get("value"))
                except ValueError:
                    v = None
                used = None if v is None else v * _UNIT_BYTES[vram["unit"]] / _MIB
            name = str(info.get("name") or "")
            procs.append(GpuProcess(pid=pid, name="" if name in _NA else name, used_mib=used))
    return out


class AmdSmiCliProbe:
    """GPU probe over the `amd-smi` CLI (name "amd-smi").

    Busy % and VRAM used come from amdgpu sysfs (`sysfs`, default SysfsProbe(): the counters
    amd-smi itself reports); processes come from `amd-smi process --json`, joined by GPU index.
    amd-smi's process list is NOT trusted as "idle": it can be empty (or print nothing) while
    another process holds the GPU (other users / PID namespaces), and it lists a process under
    every GPU it has opened. So processes only add busy reasons; a GPU is idle only when VRAM
    used and busy % say so. Raises ProbeError when sysfs shows no AMD GPU (nothing would be
    left to prove idleness) or amd-smi names a GPU index sysfs does not have.
    `run(args) -> stdout` is injectable (default: subprocess, 30 s).
    """

    name = "amd-smi"

    def __init__(self, run: Callable[[list[str]], str] | None = None,
                 sysfs: SysfsProbe | None = None) -> None:
        self._run = run or _default_run
        self.sysfs = sysfs or SysfsProbe()

    def read(self) -> list[GpuReading]:
        """One reading per AMD GPU, processes attached by index. Units: %, MiB."""
        procs = parse_amd_smi_process(self._run(list(AMD_SMI_PROCESS_COMMAND)))
        readings = self.sysfs.read()
        if not readings:
            raise ProbeError(f"`{_cmd(AMD_SMI_PROCESS_COMMAND)}` gives processes only, and sysfs "
                             f"({self.sysfs.root}) shows no AMD card for busy % and VRAM used")
        by_index = {r.index: r for r in readings}
        for gpu, plist in procs.items():
            if gpu not in by_index:
                raise ProbeError(f"`{_cmd(AMD_SMI_PROCESS_COMMAND)}` lists GPU {gpu}, but sysfs "
                                 f"({self.sysfs.root}) has AMD cards 0..{len(readings) - 1} only")
            by_index[gpu].processes = plist
        return readings


# -------------------------------------------------------------------------------------- amdsmi

