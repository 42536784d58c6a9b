"""AMD probe over `rocm-smi` (JSON/CSV, --showpids)."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Callable

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus.amd_common import _MIB, _NA, _cmd, _fallback_uuid, _number
from kopt_mcp.gpus.base import GpuProcess, GpuReading
from kopt_mcp.gpus.smi import _default_run

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
