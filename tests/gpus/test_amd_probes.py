"""AMD probes (rocm-smi, amd-smi CLI, sysfs, amdsmi library) replaying recorded real outputs.

Tool outputs come only from tests/fixtures/{rocm_smi,amd_smi}/* (each has a .source.txt naming
the command, version and origin); a malformed case is a small edit of one of them, said where it
is made. The sysfs trees are file layouts built in tmp_path, not tool output.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus import BACKENDS, make_probe
from kopt_mcp.gpus.amd import (
    AMD_SMI_PROCESS_COMMAND,
    ROCM_SMI_GPU_COMMAND,
    ROCM_SMI_PIDS_COMMAND,
    AmdSmiCliProbe,
    AmdSmiLibProbe,
    RocmSmiProbe,
    SysfsProbe,
    parse_amd_smi_process,
    parse_rocm_smi,
    parse_showpids,
)
from kopt_mcp.gpus.base import GpuProcess

FIX = Path(__file__).resolve().parents[1] / "fixtures"
BESZEL_JSON = "rocm_smi/beszel414_rx7900xtx_showtemp_showuse_showpower_meminfo_vram_oneline.json"
MARIMO_JSON = "rocm_smi/marimo9237_rx7900xt_showproductname_showuse_showmeminfo_vram.json"
MARIMO_CSV = "rocm_smi/marimo9237_rx7900xt_showproductname_showuse_showmeminfo_vram.csv"
PR120_MEMUSE = "rocm_smi/rocm_smi_lib_pr120_showmemuse_json_rocmsmi141.json"
SHOWPIDS = "rocm_smi/roc_smi_issue60_showpids.txt"
AMD_SMI_PROCS = "amd_smi/rocm_issue5706_amd_smi_process_json_rocm72.json"
MIB = 1024 * 1024


def fx(name: str) -> str:
    return (FIX / name).read_text()


class Replay:
    """A `run` answering each command with recorded text (a fixture name or literal text)."""

    def __init__(self, answers: dict[tuple[str, ...], str]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, args: list[str]) -> str:
        self.calls.append(list(args))
        if tuple(args) not in self.answers:
            raise AssertionError(f"unexpected command {args}")
        return self.answers[tuple(args)]


# a real empty `rocm-smi --showpids` answer is the line rocm_smi.py prints (showPids /
# showGpusByPid: printLog(None, 'No KFD PIDs currently running', None)); only that line is used
NO_PIDS = "No KFD PIDs currently running\n"


def rocm(gpu_fixture: str, pids: str = NO_PIDS) -> RocmSmiProbe:
    return RocmSmiProbe(Replay({tuple(ROCM_SMI_GPU_COMMAND): fx(gpu_fixture),
                                tuple(ROCM_SMI_PIDS_COMMAND): pids}))


def make_card(root: Path, n: int, used: int, total: int, busy: int | None,
              vendor: str = "0x1002", bus: str | None = None, product: str | None = None) -> None:
    """cardN/device/{vendor,mem_info_vram_used,mem_info_vram_total,gpu_busy_percent} under root;
    with `bus`, device is a symlink to a directory named after the PCI bus id (as in sysfs)."""
    root.mkdir(parents=True, exist_ok=True)
    if bus:
        target = root.parent / "pci" / bus
        target.mkdir(parents=True)
        (root / f"card{n}").mkdir()
        os.symlink(target, root / f"card{n}" / "device")
        dev = target
    else:
        dev = root / f"card{n}" / "device"
        dev.mkdir(parents=True)
    (dev / "vendor").write_text(vendor + "\n")
    (dev / "mem_info_vram_used").write_text(f"{used}\n")
    (dev / "mem_info_vram_total").write_text(f"{total}\n")
    if busy is not None:
        (dev / "gpu_busy_percent").write_text(f"{busy}\n")
    if product is not None:
        (dev / "product_name").write_text(product + "\n")


# ------------------------------------------------------------------------------- rocm-smi


def test_rocm_smi_json_rx7900xtx_oneline():
    [g] = rocm(BESZEL_JSON).read()
    assert (g.index, g.uuid, g.name, g.vendor) == (0, "amd-gpu-0", "", "amd")
    # "GPU use (%)": "0", "VRAM Total Used Memory (B)": "794341376", "VRAM Total Memory (B)": "25753026560"
    assert (g.util_pct, g.mem_used_mib, g.mem_total_mib) == (0.0, 794341376 / MIB, 25753026560 / MIB)
    assert g.mem_total_mib == 24560.0 and round(g.mem_used_mib, 2) == 757.54
    assert g.processes == []


def test_rocm_smi_json_and_csv_of_the_same_rx7900xt_agree():
    [j] = rocm(MARIMO_JSON).read()
    [c] = rocm(MARIMO_CSV).read()
    assert j == c
    # "GPU use (%)": "0", used 27856896 B, total 21458059264 B, "Card Series": "Radeon RX 7900 XT"
    assert (j.index, j.uuid, j.name) == (0, "amd-gpu-0", "Radeon RX 7900 XT")
    assert (j.util_pct, j.mem_used_mib, j.mem_total_mib) == (0.0, 27856896 / MIB, 20464.0)


def test_rocm_smi_csv_parses_to_labels():
    cards = parse_rocm_smi(fx(MARIMO_CSV))
    assert list(cards) == [0]
    assert cards[0]["Card Vendor"] == "Advanced Micro Devices Inc. [AMD/ATI]"  # comma dropped in CSV
    assert cards[0]["GFX Version"] == "gfx1100"


def test_rocm_smi_memuse_output_lacks_vram_fields_and_says_so():
    # real `rocm-smi --json --showmemuse` output: memory *activity*, no VRAM bytes, no GPU use
    with pytest.raises(ProbeError) as e:
        rocm(PR120_MEMUSE).read()
    msg = str(e.value)
    assert "rocm-smi --showuse --showmeminfo vram" in msg
    assert "'GPU use (%)'" in msg and "'VRAM Total Used Memory (B)'" in msg
    assert "'GPU memory use (%)'" in msg  # what it got instead


def test_rocm_smi_missing_one_field_names_command_and_field():
    # edit of the recorded beszel output: the "VRAM Total Used Memory (B)" entry removed
    data = json.loads(fx(BESZEL_JSON))
    del data["card0"]["VRAM Total Used Memory (B)"]
    probe = RocmSmiProbe(Replay({tuple(ROCM_SMI_GPU_COMMAND): json.dumps(data),
                                 tuple(ROCM_SMI_PIDS_COMMAND): NO_PIDS}))
    with pytest.raises(ProbeError, match=r"`rocm-smi --showuse .*--json`: card0 has no "
                                         r"'VRAM Total Used Memory \(B\)'"):
        probe.read()


def test_rocm_smi_na_vram_used_is_an_error_and_na_use_is_unknown():
    # edits of the recorded beszel output: values replaced by rocm-smi's "N/A" marker
    data = json.loads(fx(BESZEL_JSON))
    data["card0"]["GPU use (%)"] = "N/A"
    [g] = RocmSmiProbe(Replay({tuple(ROCM_SMI_GPU_COMMAND): json.dumps(data),
                               tuple(ROCM_SMI_PIDS_COMMAND): NO_PIDS})).read()
    assert g.util_pct is None and g.mem_used_mib == 794341376 / MIB
    data["card0"]["VRAM Total Used Memory (B)"] = "N/A"
    with pytest.raises(ProbeError, match="printed no value for 'VRAM Total Used Memory"):
        RocmSmiProbe(Replay({tuple(ROCM_SMI_GPU_COMMAND): json.dumps(data),
                             tuple(ROCM_SMI_PIDS_COMMAND): NO_PIDS})).read()


def test_rocm_smi_not_json_nor_csv_and_empty():
    # the recorded --showpids text given where the JSON was expected
    with pytest.raises(ProbeError, match="neither JSON nor rocm-smi CSV"):
        parse_rocm_smi(fx(SHOWPIDS))
    with pytest.raises(ProbeError, match="printed nothing"):
        parse_rocm_smi("")
    # the recorded oneline JSON cut short
    with pytest.raises(ProbeError, match="invalid JSON"):
        parse_rocm_smi(fx(BESZEL_JSON)[:60])


def test_showpids_table():
    rows = parse_showpids(fx(SHOWPIDS))
    assert len(rows) == 8
    pt, n = rows[2]
    assert (pt.pid, pt.name, n) == (1168514, "pt_main_thread", 1)
    assert pt.used_mib == 177386942464 / MIB  # VRAM USED 177386942464 B
    assert rows[0] == (GpuProcess(pid=3722222, name="test_ref", used_mib=0.0), 0)
    assert [n for _, n in rows].count(0) == 7  # KFD-open only: 0 GPUs, 0 VRAM
    assert parse_showpids(NO_PIDS) == []


def test_showpids_broken_row_and_unknown_text():
    # edit of the recorded table: the pt_main_thread row loses its last three columns
    text = fx(SHOWPIDS).replace("1168514 pt_main_thread  1       177386942464    0               4",
                                "1168514 pt_main_thread  1")
    with pytest.raises(ProbeError, match="rocm-smi --showpids.*process row"):
        parse_showpids(text)
    with pytest.raises(ProbeError, match="no 'PID  PROCESS NAME"):
        parse_showpids(fx(BESZEL_JSON))


def test_rocm_smi_single_gpu_gets_processes_using_a_gpu():
    # two recorded outputs from different machines replayed together, to test the join:
    # a one-GPU card table and a --showpids table; only processes using >= 1 GPU are attached
    [g] = rocm(MARIMO_JSON, fx(SHOWPIDS)).read()
    assert [p.pid for p in g.processes] == [1168514]


def test_rocm_smi_probe_runs_the_documented_commands():
    run = Replay({tuple(ROCM_SMI_GPU_COMMAND): fx(BESZEL_JSON), tuple(ROCM_SMI_PIDS_COMMAND): NO_PIDS})
    RocmSmiProbe(run).read()
    assert run.calls == [["rocm-smi", "--showuse", "--showmeminfo", "vram", "--showproductname",
                          "--showbus", "--json"], ["rocm-smi", "--showpids"]]


# ------------------------------------------------------------------------------- amd-smi


def test_amd_smi_process_json_two_gpus_dedup_by_pid():
    procs = parse_amd_smi_process(fx(AMD_SMI_PROCS))
    assert sorted(procs) == [0, 1]
    for gpu in (0, 1):  # the same 4 PIDs, same numbers, under both GPUs
        assert [(p.pid, p.name) for p in procs[gpu]] == [
            (213534, "/usr/bin/python3.12"), (213890, "/usr/bin/python3.12"),
            (213952, "/usr/bin/python3.12"), (213953, "/usr/bin/python3.12")]
        assert [p.used_mib for p in procs[gpu]] == [56000 / MIB, 56000 / MIB,
                                                    21008920000 / MIB, 20503796000 / MIB]
    # a repeated entry for one GPU (the file's gpu-0 block doubled) keeps each PID once
    data = json.loads(fx(AMD_SMI_PROCS))
    doubled = parse_amd_smi_process(json.dumps([data[0], data[0]]))
    assert len(doubled[0]) == 4


def test_amd_smi_process_malformed_names_command_and_key():
    # edits of the recorded output: one process loses "pid"; one entry loses "gpu"
    data = json.loads(fx(AMD_SMI_PROCS))
    del data[1]["process_list"][2]["process_info"]["pid"]
    with pytest.raises(ProbeError, match=r"`amd-smi process --json`: gpu 1: a process_info has no 'pid'"):
        parse_amd_smi_process(json.dumps(data))
    data = json.loads(fx(AMD_SMI_PROCS))
    del data[0]["gpu"]
    with pytest.raises(ProbeError, match=r"`amd-smi process --json`: entry 0 has no 'gpu'"):
        parse_amd_smi_process(json.dumps(data))
    with pytest.raises(ProbeError, match="expected a JSON list"):
        parse_amd_smi_process(fx(BESZEL_JSON))  # a rocm-smi object where amd-smi's list belongs
    assert parse_amd_smi_process("") == {}  # amd-smi printing nothing: no process information


def test_amd_smi_cli_takes_vram_and_busy_from_sysfs(tmp_path):
    root = tmp_path / "drm"
    make_card(root, 0, used=40 * MIB, total=32 * 1024 * MIB, busy=0, bus="0000:03:00.0")
    make_card(root, 1, used=40 * MIB, total=32 * 1024 * MIB, busy=0, bus="0000:83:00.0")
    run = Replay({tuple(AMD_SMI_PROCESS_COMMAND): fx(AMD_SMI_PROCS)})
    g0, g1 = AmdSmiCliProbe(run, SysfsProbe(root)).read()
    assert run.calls == [["amd-smi", "process", "--json"]]
    assert (g0.uuid, g1.uuid) == ("0000:03:00.0", "0000:83:00.0")
    assert (g0.util_pct, g0.mem_used_mib, g0.mem_total_mib) == (0.0, 40.0, 32768.0)
    assert [p.pid for p in g0.processes] == [213534, 213890, 213952, 213953] == [p.pid for p in g1.processes]


def test_amd_smi_cli_needs_sysfs_and_matching_indices(tmp_path):
    run = Replay({tuple(AMD_SMI_PROCESS_COMMAND): fx(AMD_SMI_PROCS)})
    with pytest.raises(ProbeError, match="gives processes only.*no AMD card"):
        AmdSmiCliProbe(run, SysfsProbe(tmp_path / "absent")).read()
    make_card(tmp_path / "drm", 0, used=0, total=MIB, busy=0)  # one card; amd-smi names GPU 1 too
    with pytest.raises(ProbeError, match="lists GPU 1, but sysfs"):
        AmdSmiCliProbe(run, SysfsProbe(tmp_path / "drm")).read()


# --------------------------------------------------------------------------------- sysfs


def test_sysfs_reads_amd_cards_only_in_card_order(tmp_path):
    root = tmp_path / "drm"
    make_card(root, 0, used=0, total=MIB, busy=0, vendor="0x1a03")  # a BMC's VGA, not AMD
    make_card(root, 1, used=1536 * MIB, total=196592 * MIB, busy=99, bus="0000:0C:00.0",
              product="AMD Instinct MI300X")
    make_card(root, 10, used=12 * MIB, total=196592 * MIB, busy=None)
    (root / "card1-DP-1").mkdir()  # connector entry
    (root / "renderD128").mkdir()
    a, b = SysfsProbe(root).read()
    assert (a.index, a.uuid, a.name, a.vendor) == (0, "0000:0c:00.0", "AMD Instinct MI300X", "amd")
    assert (a.util_pct, a.mem_used_mib, a.mem_total_mib) == (99.0, 1536.0, 196592.0)
    assert (b.index, b.uuid, b.name, b.util_pct, b.mem_used_mib) == (1, "amd-gpu-1", "", None, 12.0)
    assert SysfsProbe(tmp_path / "absent").read() == []


def test_sysfs_unreadable_vram_names_the_file(tmp_path):
    root = tmp_path / "drm"
    make_card(root, 0, used=0, total=MIB, busy=0)
    (root / "card0" / "device" / "mem_info_vram_used").unlink()
    with pytest.raises(ProbeError, match=r"sysfs: cannot read .*card0/device/mem_info_vram_used"):
        SysfsProbe(root).read()
    (root / "card0" / "device" / "mem_info_vram_used").write_text("busy\n")
    with pytest.raises(ProbeError, match="mem_info_vram_used is not a number: 'busy'"):
        SysfsProbe(root).read()


# ----------------------------------------------------------------------- amdsmi + make_probe


def test_amdsmi_library_absent_here_is_not_available(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "amdsmi", None)  # makes `import amdsmi` fail
    assert AmdSmiLibProbe.available() is False
    with pytest.raises(ProbeError, match="import amdsmi failed"):
        AmdSmiLibProbe().read()


def test_make_probe_explicit_amd_backends():
    assert {"amdsmi", "amd-smi", "rocm-smi", "sysfs"} <= set(BACKENDS)
    for b, cls in [("amdsmi", AmdSmiLibProbe), ("amd-smi", AmdSmiCliProbe),
                   ("rocm-smi", RocmSmiProbe), ("sysfs", SysfsProbe)]:
        p = make_probe(b)
        assert isinstance(p, cls) and p.name == b
    with pytest.raises(ValueError, match="amdsmi, amd-smi, rocm-smi, sysfs"):
        make_probe("rocm")


@pytest.mark.parametrize("answering, expected", [
    (set(), "none"),
    ({"sysfs"}, "sysfs"),
    ({"rocm-smi", "sysfs"}, "rocm-smi"),
    ({"amd-smi", "rocm-smi", "sysfs"}, "amd-smi"),
    ({"amdsmi", "amd-smi", "rocm-smi", "sysfs"}, "amdsmi"),
    ({"nvidia-smi", "amdsmi", "sysfs"}, "nvidia-smi"),
    ({"nvml", "nvidia-smi", "amdsmi"}, "nvml"),
])
def test_make_probe_auto_order(monkeypatch, answering, expected):
    from kopt_mcp import gpus
    from kopt_mcp.gpus.nvml import NvmlProbe

    monkeypatch.setattr(NvmlProbe, "available", staticmethod(lambda: "nvml" in answering))
    for name, fn in [("nvidia-smi", "_smi_answers"), ("amdsmi", "_amdsmi_answers"),
                     ("amd-smi", "_amd_smi_cli_answers"), ("rocm-smi", "_rocm_smi_answers"),
                     ("sysfs", "_sysfs_answers")]:
        monkeypatch.setattr(gpus, fn, lambda name=name: name in answering)
    assert make_probe("auto").name == expected


def test_config_accepts_amd_probe_names():
    from kopt_mcp.config import GatesSection

    for b in ("amdsmi", "amd-smi", "rocm-smi", "sysfs"):
        assert GatesSection(gpu_probe=b).gpu_probe == b
