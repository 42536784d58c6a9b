"""nvidia-smi CSV parsing and NvidiaSmiProbe, replaying recorded real output."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus.smi import (
    APPS_COMMAND,
    GPU_COMMAND,
    GPU_FIELDS,
    NvidiaSmiProbe,
    parse_compute_apps_csv,
    parse_query_gpu_csv,
)
from tests.gpus.conftest import BUSY, FIXTURES, IDLE, X8, SmiReplay, fixture_text


def test_header_csv_units_are_stripped():
    rows = parse_query_gpu_csv(fixture_text("h200_busy_query_gpu_header.csv"))
    assert rows == [{"index": "0", "uuid": "GPU-763239df-7b01-13f8-e588-aef9a2bf4e4f",
                     "name": "NVIDIA H200", "utilization.gpu": "99", "memory.used": "883",
                     "memory.total": "143771"}]


def test_noheader_nounits_equals_header_output_of_the_same_gpu():
    with_header = parse_query_gpu_csv(fixture_text("h200_query_gpu_header.csv"))
    noheader = parse_query_gpu_csv(fixture_text("h200_query_gpu_noheader_nounits.csv"), GPU_FIELDS)
    assert noheader == with_header


def test_noheader_without_fields_is_refused_not_misread():
    with pytest.raises(ProbeError, match="pass `fields`"):
        parse_query_gpu_csv(fixture_text("h200_query_gpu_noheader_nounits.csv"))


def test_p100_nounits_keeps_header_units_and_na_is_none():
    [row] = parse_query_gpu_csv(fixture_text("netdata_tesla_p100_query_gpu_csv_nounits.csv"))
    assert row["fan.speed"] is None  # printed as [N/A]
    assert row["name"] == "Tesla P100-PCIE-16GB"
    assert (row["memory.used"], row["memory.free"], row["utilization.gpu"]) == ("0", "16280", "0")
    assert row["power.draw"] == "28.16" and row["pstate"] == "P0"
    assert row["clocks.current.video"] == "835"  # last field, file has no trailing newline


def test_compute_apps_busy_and_idle():
    assert parse_compute_apps_csv(fixture_text("h200_query_compute_apps_idle.csv")) == []
    assert parse_compute_apps_csv(fixture_text("h200_busy_query_compute_apps.csv")) == [
        {"pid": "400", "process_name": "/opt/torch/.venv/bin/python3", "used_gpu_memory": "874",
         "gpu_uuid": "GPU-763239df-7b01-13f8-e588-aef9a2bf4e4f"}]


def test_compute_apps_other_column_order_and_not_found_name():
    rows = parse_compute_apps_csv(fixture_text("h200x8_query_compute_apps_before.csv"))
    assert len(rows) == 8
    assert rows[-1] == {"gpu_uuid": "GPU-28780eb0-24d5-1f13-59b8-ae5c23617a72", "pid": "1758887",
                        "process_name": None, "used_gpu_memory": "58060"}


def test_row_with_a_missing_field_is_an_error():
    # the recorded busy output, cut short: the last field of the data row is lost
    text = fixture_text("h200_busy_query_gpu_header.csv").rstrip("\n").rsplit(",", 1)[0] + "\n"
    with pytest.raises(ProbeError, match="has 5 fields, expected 6"):
        parse_query_gpu_csv(text)


def test_probe_idle_h200_runs_the_two_documented_commands():
    run = SmiReplay(IDLE)
    [g] = NvidiaSmiProbe(run).read()
    assert run.calls == [GPU_COMMAND, APPS_COMMAND]
    assert GPU_COMMAND == ["nvidia-smi",
                           "--query-gpu=index,uuid,name,utilization.gpu,memory.used,memory.total",
                           "--format=csv"]
    assert APPS_COMMAND == ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory,gpu_uuid",
                            "--format=csv"]
    assert (g.index, g.uuid, g.name, g.vendor) == (0, "GPU-12d4823c-c93c-be36-630b-84be7a395e90",
                                                    "NVIDIA H200", "nvidia")
    assert (g.util_pct, g.mem_used_mib, g.mem_total_mib, g.processes) == (0.0, 0.0, 143771.0, [])


def test_probe_busy_h200_joins_the_process_by_uuid():
    [g] = NvidiaSmiProbe(SmiReplay(BUSY)).read()
    assert g.util_pct == 99.0 and g.mem_used_mib == 883.0
    [p] = g.processes
    assert (p.pid, p.name, p.used_mib) == (400, "/opt/torch/.venv/bin/python3", 874.0)


def test_probe_8x_h200_before():
    gpus = NvidiaSmiProbe(SmiReplay(X8)).read()
    assert [g.index for g in gpus] == list(range(8))
    for g in gpus:  # each GPU got exactly its own process, matched by uuid, not by row order
        assert len(g.processes) == 1
    assert gpus[2].processes[0].pid == 1425258 and gpus[3].processes[0].pid == 1328669
    g7 = gpus[7]
    assert g7.name == ""  # this query had no name column
    assert (g7.util_pct, g7.mem_used_mib) == (0.0, 58071.0)
    assert (g7.processes[0].pid, g7.processes[0].name, g7.processes[0].used_mib) == (1758887, "", 58060.0)


@pytest.mark.parametrize("wrong", ["netdata_tesla_p100_query_gpu_csv_nounits.csv", "h200_plain.txt"])
def test_probe_output_without_index_names_command_and_column(wrong):
    probe = NvidiaSmiProbe(SmiReplay((wrong, IDLE[1])))
    with pytest.raises(ProbeError) as e:
        probe.read()
    assert "--query-gpu=" in str(e.value) and "no column 'index'" in str(e.value)


def test_probe_apps_output_without_gpu_uuid_names_the_column():
    # the query-gpu output answering the compute-apps query has no pid column
    probe = NvidiaSmiProbe(SmiReplay((IDLE[0], IDLE[0])))
    with pytest.raises(ProbeError, match=r"--query-compute-apps=.*no column 'pid'"):
        probe.read()


def _fake_smi(tmp_path: Path, body: str) -> Path:
    """A directory holding an executable `nvidia-smi` shell script with `body`."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return bindir


def test_default_run_goes_through_subprocess(tmp_path, monkeypatch):
    body = (f'case "$1" in --query-gpu=*) cat "{FIXTURES / BUSY[0]}";;\n'
            f'--query-compute-apps=*) cat "{FIXTURES / BUSY[1]}";; esac\n')
    monkeypatch.setenv("PATH", f"{_fake_smi(tmp_path, body)}{os.pathsep}{os.environ['PATH']}")
    [g] = NvidiaSmiProbe().read()
    assert g.processes[0].pid == 400


def test_default_run_missing_binary_and_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ProbeError, match="not found on PATH"):
        NvidiaSmiProbe().read()
    monkeypatch.setenv("PATH", str(_fake_smi(tmp_path, "exit 9\n")))
    with pytest.raises(ProbeError, match="exited 9"):
        NvidiaSmiProbe().read()


def test_nvidia_smi_that_prints_nothing_is_an_error_naming_the_command(tmp_path, monkeypatch):
    # nvidia-smi exits 0 with empty output (as amd-smi has been reported to do while a GPU is held):
    # never read as "no GPU busy"
    monkeypatch.setenv("PATH", str(_fake_smi(tmp_path, "exit 0\n")))
    with pytest.raises(ProbeError, match=r"`nvidia-smi --query-gpu=.*` printed nothing"):
        NvidiaSmiProbe().read()


def test_nvidia_smi_that_hangs_is_stopped_and_named(tmp_path, monkeypatch):
    import kopt_mcp.gpus.smi as smi

    monkeypatch.setattr(smi, "RUN_TIMEOUT_S", 0.5)
    monkeypatch.setenv("PATH", f"{_fake_smi(tmp_path, 'exec sleep 30' + chr(10))}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(ProbeError, match=r"did not answer within 0.5 s"):
        NvidiaSmiProbe().read()
