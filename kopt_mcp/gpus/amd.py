"""AMD GPU probes: the `amdsmi` library, the `amd-smi` CLI, `rocm-smi`, and amdgpu's sysfs files.

Which signal says "idle" on AMD
-------------------------------
The gate's decision rests on **VRAM used and busy %**, read from the driver's own counters
(amdgpu sysfs `mem_info_vram_used` / `gpu_busy_percent`, which rocm-smi and amd-smi also report).
They stay right while another process holds the GPU: a process that allocated memory moves VRAM
used whether or not a tool can name it. Process lists are added as *extra* busy reasons only,
never as proof of idleness:

- `amd-smi process` lists a process under every GPU it has opened, with the same numbers under
  each (tests/fixtures/amd_smi/*.source.txt), and shows nothing for processes in another PID
  namespace / of another user without privileges;
- `rocm-smi --showpids` gives the *number* of GPUs a process uses, not which ones, so its
  processes are attributed to a GPU only on a host with a single AMD GPU.

So a probe never reports a GPU with unknown VRAM used: where it cannot read it, it raises
ProbeError (the gate then fails loudly instead of leasing a GPU it could not see).

Identity
--------
`index` is the index `ROCR_VISIBLE_DEVICES` takes (see `lease.binding_env`): rocm-smi's `cardN`,
amd-smi's `gpu`, the enumeration order of amdsmi handles, or the order of AMD `cardN` entries in
sysfs. These orders agree on ordinary hosts (all follow the KFD / PCI order); that was not checked
on hardware here. `uuid` (the lease key) is the PCI bus id ("0000:03:00.0") where the source gives
one, so that every AMD backend locks the same file for the same GPU; else f"amd-gpu-{index}".
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kopt_mcp.gpus.base import GpuProcess, GpuReading, ProbeError
from kopt_mcp.gpus.smi import _default_run

_MIB = 1024 * 1024
_UNIT_BYTES = {"B": 1, "KB": 1024, "KiB": 1024, "MB": _MIB, "MiB": _MIB,
               "GB": 1024 ** 3, "GiB": 1024 ** 3}
_NA = {"", "N/A", "NA", "n/a", "Unknown", "UNKNOWN", "Not supported", "Not Supported"}

AMD_VENDOR_ID = "0x1002"


def _fallback_uuid(index: int) -> str:
    return f"amd-gpu-{index}"


def _cmd(args: list[str]) -> str:
    return " ".join(args)


def _number(v: Any) -> float | None:
    """A number from a tool's value: 12, "12", "12.5" -> float; "N/A"-style markers -> None.

    Raises ValueError for anything else (the caller names the command and field).
    """
    if v is None:
        return None
    if isinstance(v, bool):
        raise ValueError(repr(v))  # noqa: TRY004 - callers turn ValueError into ProbeError
    if isinstance(v, (int, float)):
        return float(v)
    s = str(v).strip()
    if s in _NA:
        return None
    return float(s)


# --------------------------------------------------------------------------------------- sysfs


class SysfsProbe:
    """Reads amdgpu's sysfs files (name "sysfs"): no tool, no library, no privileges needed.

    For every `root/cardN` (N digits only; connector entries such as `card0-DP-1` are skipped)
    whose `device/vendor` is 0x1002: `device/gpu_busy_percent` (%), `device/mem_info_vram_used`
    and `device/mem_info_vram_total` (bytes). `index` = position among those cards in N order.
    `uuid` = the PCI bus id that `cardN/device` links to, else f"amd-gpu-{index}". `name` =
    `device/product_name` where the driver provides it, else "". Processes: none (sysfs has no
    process list; the idle decision rests on busy % and VRAM used, see the module docstring).
    """

    name = "sysfs"

    def __init__(self, root: Path | str = Path("/sys/class/drm")) -> None:
        self.root = Path(root)

    def cards(self) -> list[Path]:
        """The AMD `cardN` directories under `root`, in N order ([] when root is missing)."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = re.fullmatch(r"card(\d+)", p.name)
            if not m:
                continue
            try:
                vendor = (p / "device" / "vendor").read_text().strip().lower()
            except OSError:
                continue
            if vendor == AMD_VENDOR_ID:
                found.append((int(m.group(1)), p))
        return [p for _, p in sorted(found)]

    @staticmethod
    def _read(path: Path, required: bool) -> float | None:
        try:
            text = path.read_text().strip()
        except OSError as e:
            if required:
                raise ProbeError(f"sysfs: cannot read {path}: {e.strerror or e}") from e
            return None
        try:
            return float(text)
        except ValueError as e:
            raise ProbeError(f"sysfs: {path} is not a number: {text!r}") from e

    def read(self) -> list[GpuReading]:
        """One reading per AMD card (empty list: none). Units: %, MiB.

        Raises ProbeError naming the file when `mem_info_vram_used` or `mem_info_vram_total`
        cannot be read or is not a number (busy % may be absent: None).
        """
        out = []
        for index, card in enumerate(self.cards()):
            dev = card / "device"
            used = self._read(dev / "mem_info_vram_used", required=True)
            total = self._read(dev / "mem_info_vram_total", required=True)
            busy = self._read(dev / "gpu_busy_percent", required=False)
            uuid = _fallback_uuid(index)
            if dev.is_symlink():
                bus = dev.resolve().name
                if re.fullmatch(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", bus):
                    uuid = bus.lower()
            try:
                name = (dev / "product_name").read_text().strip()
            except OSError:
                name = ""
            out.append(GpuReading(index=index, uuid=uuid, name=name, vendor="amd", util_pct=busy,
                                  mem_used_mib=used / _MIB, mem_total_mib=total / _MIB))
        return out


# ------------------------------------------------------------------------------------ rocm-smi

ROCM_SMI_GPU_COMMAND = ["rocm-smi", "--showuse", "--showmeminfo", "vram", "--showproductname",
                        "--showbus", "--json"]
ROCM_SMI_PIDS_COMMAND = ["rocm-smi", "--showpids"]
# keys as rocm-smi prints them (tests/fixtures/rocm_smi/*); "PCI Bus" is printed by showBus()
# in rocm_smi.py (ROCm/rocm_smi_lib python_smi_tools/rocm_smi.py, checked in the code index)
K_USE = "GPU use (%)"
K_VRAM_TOTAL = "VRAM Total Memory (B)"
K_VRAM_USED = "VRAM Total Used Memory (B)"
K_SERIES = "Card Series"
K_BUS = "PCI Bus"
# rocm_smi.py prints this line when no process has /dev/kfd open
NO_KFD_PIDS = "No KFD PIDs currently running"


def parse_rocm_smi(text: str, cmd: list[str] | None = None) -> dict[int, dict[str, str]]:
    """Parse rocm-smi `--json` or `--csv` output into {card index: {label: value string}}.

    JSON: {"card0": {"GPU use (%)": "0", ...}, "system": {...}}; CSV: a header line starting
    with "device" and one line per "cardN". Non-card keys ("system") are skipped.
    Raises ProbeError naming `cmd` when the text is neither, or has no `cardN` entry.
    """
    cmd = cmd or ROCM_SMI_GPU_COMMAND
    s = text.strip()
    if not s:
        raise ProbeError(f"`{_cmd(cmd)}` printed nothing (expected JSON with cardN entries)")
    cards: dict[int, dict[str, str]] = {}
    if s.startswith("{"):
        try:
            data = json.loads(s)
        except json.JSONDecodeError as e:
            raise ProbeError(f"`{_cmd(cmd)}` printed invalid JSON: {e}") from e
        if not isinstance(data, dict):
            raise ProbeError(f"`{_cmd(cmd)}`: expected a JSON object of cardN entries")
        for key, fields in data.items():
            m = re.fullmatch(r"card(\d+)", key)
            if m and isinstance(fields, dict):
                cards[int(m.group(1))] = {str(k): str(v) for k, v in fields.items()}
    else:
        rows = list(csv.reader([ln for ln in s.splitlines() if ln.strip()]))
        if rows and rows[0] and rows[0][0].strip() == "device":
            header = [h.strip() for h in rows[0]]
            for n, row in enumerate(rows[1:], start=1):
                if len(row) != len(header):
                    raise ProbeError(f"`{_cmd(cmd)}`: CSV row {n} has {len(row)} fields, "
                                     f"expected {len(header)} ({', '.join(header)})")
                m = re.fullmatch(r"card(\d+)", row[0].strip())
                if m:
                    cards[int(m.group(1))] = {h: v.strip() for h, v in zip(header[1:], row[1:])}
        else:
            raise ProbeError(f"`{_cmd(cmd)}`: output is neither JSON nor rocm-smi CSV "
                             f"(first line {s.splitlines()[0][:80]!r})")
    if not cards:
        raise ProbeError(f"`{_cmd(cmd)}`: no cardN entry in the output")
    return cards


def _card_reading(index: int, fields: dict[str, str], cmd: list[str]) -> GpuReading:
    """One rocm-smi card as a GpuReading; ProbeError naming `cmd` and any missing field."""
    missing = [k for k in (K_USE, K_VRAM_USED, K_VRAM_TOTAL) if k not in fields]
    if missing:
        raise ProbeError(f"`{_cmd(cmd)}`: card{index} has no {', '.join(repr(k) for k in missing)} "
                         f"(got {', '.join(repr(k) for k in fields) or 'nothing'})")
    vals: dict[str, float | None] = {}
    for k in (K_USE, K_VRAM_USED, K_VRAM_TOTAL):
        try:
            vals[k] = _number(fields[k])
        except ValueError as e:
            raise ProbeError(f"`{_cmd(cmd)}`: card{index} {k!r} is not a number: "
                             f"{fields[k]!r}") from e
    if vals[K_VRAM_USED] is None:
        raise ProbeError(f"`{_cmd(cmd)}`: card{index} printed no value for {K_VRAM_USED!r} "
                         "(VRAM used is the idle signal on AMD)")
    bus = fields.get(K_BUS, "").strip()
    uuid = bus.lower() if bus and bus not in _NA else _fallback_uuid(index)
    series = fields.get(K_SERIES, "").strip()
    return GpuReading(
        index=index, uuid=uuid, name="" if series in _NA else series, vendor="amd",
        util_pct=vals[K_USE], mem_used_mib=vals[K_VRAM_USED] / _MIB,
        mem_total_mib=None if vals[K_VRAM_TOTAL] is None else vals[K_VRAM_TOTAL] / _MIB,
    )


def parse_showpids(text: str, cmd: list[str] | None = None) -> list[tuple[GpuProcess, int]]:
    """Parse `rocm-smi --showpids` text into (process, number of GPUs it uses) pairs.

    Table columns: PID, PROCESS NAME, GPU(s), VRAM USED (bytes), SDMA USED, CU OCCUPANCY;
    the name may hold spaces, so the four numbers are taken from the right. "No KFD PIDs
    currently running" -> []. Raises ProbeError naming `cmd` when neither the table header nor
    that line is there, or a row does not have its numbers.
    """
    cmd = cmd or ROCM_SMI_PIDS_COMMAND
    if NO_KFD_PIDS in text:
        return []
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines)
                  if ln.split()[:1] == ["PID"] and "PROCESS NAME" in ln), None)
    if start is None:
        raise ProbeError(f"`{_cmd(cmd)}`: no 'PID  PROCESS NAME ...' table header and no "
                         f"{NO_KFD_PIDS!r} line in the output")
    out = []
    for ln in lines[start + 1:]:
        if not ln.strip() or ln.lstrip().startswith("="):
            break
        parts = ln.split()
        if len(parts) < 6 or not parts[0].isdigit():
            raise ProbeError(f"`{_cmd(cmd)}`: process row has no PID, GPU(s) and VRAM USED: {ln!r}")
        try:
            n_gpus = int(parts[-4])
            vram = _number(parts[-3])
        except ValueError as e:
            raise ProbeError(f"`{_cmd(cmd)}`: GPU(s) / VRAM USED not numbers in {ln!r}") from e
        out.append((GpuProcess(pid=int(parts[0]), name=" ".join(parts[1:-4]),
                               used_mib=None if vram is None else vram / _MIB), n_gpus))
    return out


class RocmSmiProbe:
    """GPU probe that runs `rocm-smi` (name "rocm-smi").

    Runs `ROCM_SMI_GPU_COMMAND` (JSON; CSV output of the same labels parses too) for busy %,
    VRAM used/total (bytes -> MiB), card series and PCI bus, then `rocm-smi --showpids`. That
    table says how many GPUs a process uses, not which, so processes (those using >= 1 GPU)
    are attached only when the host has exactly one AMD GPU; elsewhere VRAM used and busy %
    decide (module docstring). `run(args) -> stdout` is injectable (default: subprocess, 30 s).
    """

    name = "rocm-smi"

    def __init__(self, run: Callable[[list[str]], str] | None = None) -> None:
        self._run = run or _default_run

    def read(self) -> list[GpuReading]:
        """One reading per cardN, in index order. Raises ProbeError naming the command and the
        missing field when an output does not parse (e.g. no 'VRAM Total Used Memory (B)')."""
        cards = parse_rocm_smi(self._run(list(ROCM_SMI_GPU_COMMAND)), ROCM_SMI_GPU_COMMAND)
        out = [_card_reading(i, cards[i], ROCM_SMI_GPU_COMMAND) for i in sorted(cards)]
        procs = parse_showpids(self._run(list(ROCM_SMI_PIDS_COMMAND)), ROCM_SMI_PIDS_COMMAND)
        if len(out) == 1:
            out[0].processes = [p for p, n in procs if n >= 1]
        return out


# ------------------------------------------------------------------------------------- amd-smi

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

_lib_lock = threading.Lock()
_lib_initialised = False


class AmdSmiLibProbe:
    """GPU probe over the `amdsmi` Python library (name "amdsmi"), imported lazily.

    Calls used, each checked against ROCm/amdsmi py-interface/amdsmi_interface.py (code index)
    and the AMD SMI Python API reference (rocm.docs.amd.com/projects/amdsmi):
    amdsmi_init, amdsmi_get_processor_handles, amdsmi_get_gpu_activity (-> "gfx_activity", %),
    amdsmi_get_gpu_vram_usage (-> "vram_used"/"vram_total", documented "In MB" in
    amdsmi_vram_usage_t), amdsmi_get_gpu_device_bdf (-> "0000:03:00.0"),
    amdsmi_get_gpu_asic_info (-> "market_name"), amdsmi_get_gpu_process_list (old versions:
    process handles for amdsmi_get_gpu_process_info; newer: dicts) with "pid", "name",
    "memory_usage"{"vram_mem" bytes}. Not run on AMD hardware here.
    """

    name = "amdsmi"

    @staticmethod
    def available() -> bool:
        """True when `import amdsmi` works. Never raises."""
        try:
            import amdsmi  # noqa: F401
        except Exception:  # noqa: BLE001 - a broken install is "not available"
            return False
        return True

    @staticmethod
    def _lib() -> Any:
        global _lib_initialised
        try:
            import amdsmi
        except Exception as e:
            raise ProbeError(f"import amdsmi failed: {e} (install ROCm's amdsmi package)") from e
        with _lib_lock:
            if not _lib_initialised:
                try:
                    amdsmi.amdsmi_init()
                except Exception as e:
                    raise ProbeError(f"amdsmi: amdsmi_init failed: {e}") from e
                _lib_initialised = True
        return amdsmi

    @staticmethod
    def _call(lib: Any, fn: str, *args: Any) -> Any:
        try:
            return getattr(lib, fn)(*args)
        except Exception as e:
            raise ProbeError(f"amdsmi: {fn} failed: {e}") from e

    def _processes(self, lib: Any, h: Any) -> list[GpuProcess]:
        out: dict[int, GpuProcess] = {}
        for p in self._call(lib, "amdsmi_get_gpu_process_list", h) or []:
            info = p if isinstance(p, dict) else self._call(lib, "amdsmi_get_gpu_process_info", h, p)
            try:
                pid = int(info["pid"])
            except (KeyError, TypeError, ValueError):
                continue
            vram = (info.get("memory_usage") or {}).get("vram_mem")
            try:
                used = _number(vram)
            except ValueError:
                used = None
            out.setdefault(pid, GpuProcess(pid=pid, name=str(info.get("name") or ""),
                                           used_mib=None if used is None else used / _MIB))
        return list(out.values())

    def read(self) -> list[GpuReading]:
        """One reading per processor handle, index = enumeration order. Units: %, MiB.
        Raises ProbeError naming the failing call; VRAM used that is not a number is an error."""
        lib = self._lib()
        out = []
        for index, h in enumerate(self._call(lib, "amdsmi_get_processor_handles")):
            vram = self._call(lib, "amdsmi_get_gpu_vram_usage", h)
            try:
                used, total = _number(vram.get("vram_used")), _number(vram.get("vram_total"))
            except ValueError as e:
                raise ProbeError(f"amdsmi: amdsmi_get_gpu_vram_usage gave no numbers: {vram!r}") from e
            if used is None:
                raise ProbeError(f"amdsmi: amdsmi_get_gpu_vram_usage has no 'vram_used': {vram!r}")
            try:
                util = _number(self._call(lib, "amdsmi_get_gpu_activity", h).get("gfx_activity"))
            except (ProbeError, ValueError, AttributeError):
                util = None
            try:
                uuid = str(self._call(lib, "amdsmi_get_gpu_device_bdf", h)).lower() or _fallback_uuid(index)
            except ProbeError:
                uuid = _fallback_uuid(index)
            try:
                name = str(self._call(lib, "amdsmi_get_gpu_asic_info", h).get("market_name") or "")
            except (ProbeError, AttributeError):
                name = ""
            out.append(GpuReading(index=index, uuid=uuid, name=name, vendor="amd", util_pct=util,
                                  mem_used_mib=used, mem_total_mib=total,
                                  processes=self._processes(lib, h)))
        return out


def on_path(tool: str) -> bool:
    """True when `tool` is on PATH."""
    return shutil.which(tool) is not None
