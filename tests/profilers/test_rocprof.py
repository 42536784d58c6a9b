"""rocprofv3 backend: wrap, the factory, and parsing every recorded rocprofv3 CSV layout.

Every input is a recorded real rocprofv3 output from tests/fixtures/rocprofv3/ (see each
.source.txt); the malformed cases are small edits of those files, said where made.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.trace import target_gpu_time
from kopt_mcp.profilers import BACKENDS, NoProfiler, RocprofV3Profiler, make_profiler
from kopt_mcp.profilers.rocprof import parse_rocprof_csv

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "rocprofv3"
DOCS_TRACE = FIX / "rocprofiler_sdk_docs_kernel_trace.csv"
LEGACY_TRACE = FIX / "rocprofiler_sdk_2024_kernel_trace_legacy_schema.csv"
ROCPD_TRACE = FIX / "hpctraining_rocpd2csv_out_kernel_trace.csv"
STATS = FIX / "hpctraining_jacobi_hip_kernel_stats.csv"
COUNTERS = FIX / "rocprofiler_sdk_docs_counter_collection.csv"
HIP_API_STATS = FIX / "rocprofiler_sdk_docs_hip_api_stats.csv"

ADD = "void addition_kernel<float>(float*, float const*, float const*, int, int)"
DIV = "divide_kernel(float*, float const*, float const*, int, int)"


def place(out: Path, fixture: Path, rel: str, edit=None) -> Path:
    """Copy `fixture` to out/rel (rocprofv3 nests files as <host>/<pid>/...), optionally edited."""
    dest = out / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if edit is None:
        shutil.copy(fixture, dest)
    else:
        dest.write_text(edit(fixture.read_text()))
    return out


# ---- wrap / available / factory ------------------------------------------------------------

def test_wrap_uses_the_documented_flags_and_quotes_the_command(tmp_path):
    out = tmp_path / "run dir"
    cmd = RocprofV3Profiler().wrap("python b.py --n 2; echo 'x'", out)
    assert shlex.split(cmd) == [
        "rocprofv3", "--kernel-trace", "--stats", "--output-format", "csv", "-d", str(out),
        "-o", "run", "--", "bash", "-c", "python b.py --n 2; echo 'x'",
    ]


@pytest.fixture
def rocprof_on_path(tmp_path, monkeypatch):
    fake = tmp_path / "bin" / "rocprofv3"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))


def test_auto_picks_rocprofv3_on_amd(rocprof_on_path):
    profiler = make_profiler("auto", "amd", detail=True)
    assert isinstance(profiler, RocprofV3Profiler) and profiler.name == "rocprofv3"
    assert profiler.available()


@pytest.mark.parametrize("vendor", ["nvidia", "cpu", "none"])
def test_auto_does_not_pick_rocprofv3_off_amd(rocprof_on_path, vendor):
    assert isinstance(make_profiler("auto", vendor), NoProfiler)


def test_auto_on_amd_without_rocprofv3_is_none(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    assert isinstance(make_profiler("auto", "amd"), NoProfiler)
    assert not RocprofV3Profiler().available()


def test_explicit_rocprofv3(rocprof_on_path):
    assert isinstance(make_profiler("rocprofv3", "amd"), RocprofV3Profiler)


def test_explicit_rocprofv3_missing_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    with pytest.raises(ProfilerError, match=r'rocprofv3 not found on PATH.*backend = "none"'):
        make_profiler("rocprofv3", "amd")


def test_unknown_backend_lists_rocprofv3():
    with pytest.raises(ValueError, match="'rocprofv3'"):
        make_profiler("omniperf", "amd")
    assert "rocprofv3" in BACKENDS


def test_config_accepts_rocprofv3():
    from kopt_mcp.config import ProfilerSection

    assert ProfilerSection(backend="rocprofv3").backend == "rocprofv3"


# ---- parsing each recorded layout ----------------------------------------------------------

def test_docs_kernel_trace_nested_dir(tmp_path):
    out = place(tmp_path / "out", DOCS_TRACE, "myhost/834304/run_kernel_trace.csv")
    trace = RocprofV3Profiler().parse(out)
    assert trace.backend == "rocprofv3" and trace.warnings == []
    assert [k.name for k in trace.kernels] == [
        ADD, DIV, "multiply_kernel(float*, float const*, float const*, int, int)",
        "subtract_kernel(float*, float const*, float const*, int, int)",
    ]
    add = trace.kernels[0]
    # dispatches 1, 5, 13: 12800 + 11400 + 9840 ns (End - Start of the three rows)
    assert add.calls == 3
    assert add.total_us == pytest.approx(34.04)
    assert add.avg_us == pytest.approx(34.04 / 3)
    assert trace.total_gpu_us == pytest.approx(96.16)
    assert add.share_pct == pytest.approx(100 * 34.04 / 96.16)
    assert add.extra == {"arch_vgpr": 8.0, "accum_vgpr": 0.0, "sgpr": 16.0, "lds_bytes": 0.0,
                         "scratch_bytes": 0.0}
    assert add.block_size == 64 and add.grid_size == 1024 * 1024 // 64
    div = trace.kernels[1]
    assert (div.calls, div.extra["arch_vgpr"], div.extra["accum_vgpr"]) == (2, 12.0, 4.0)
    assert div.registers_per_thread == 16  # arch + accum VGPRs per lane
    assert sum(k.share_pct for k in trace.kernels) == pytest.approx(100.0)


def test_legacy_2024_schema(tmp_path):
    out = place(tmp_path / "out", LEGACY_TRACE, "kernel_trace.csv")
    trace = RocprofV3Profiler().parse(out)
    add = trace.kernels[0]
    assert add.name == ADD and add.calls == 4
    assert add.total_us == pytest.approx((48744 + 100895 + 130526 + 133341) / 1e3)
    # Private_Segment_Size -> scratch, Group_Segment_Size -> LDS; no register columns then
    assert add.extra == {"lds_bytes": 0.0, "scratch_bytes": 0.0}
    assert add.registers_per_thread is None
    assert [(k.name.split("(")[0], k.calls) for k in trace.kernels[1:]] == [
        ("subtract_kernel", 2), ("multiply_kernel", 1)]


def test_rocpd2csv_layout(tmp_path):
    out = place(tmp_path / "out", ROCPD_TRACE, "rocpd-output-data/out_kernel_trace.csv")
    trace = RocprofV3Profiler().parse(out)
    top = trace.kernels[0]
    assert top.name == "__omp_offloading_30_57b9f__QMnorm_modPnorm_l23"
    assert top.calls == 3 and top.total_us == pytest.approx(285.76)
    assert top.extra == {"arch_vgpr": 16.0, "accum_vgpr": 0.0, "sgpr": 32.0, "lds_bytes": 8456.0,
                         "scratch_bytes": 0.0}
    assert top.shared_mem_per_block_bytes == 8456
    boundary = next(k for k in trace.kernels if "boundary" in k.name)
    assert (boundary.extra["arch_vgpr"], boundary.extra["accum_vgpr"], boundary.extra["sgpr"]) == (20, 4, 64)
    assert boundary.block_size == 32 and boundary.grid_size == 128
    assert trace.total_gpu_us == pytest.approx(551.28)


def test_kernel_stats_only(tmp_path):
    out = place(tmp_path / "out", STATS, "host/42/run_kernel_stats.csv")
    trace = RocprofV3Profiler().parse(out)
    top = trace.kernels[0]
    assert top.name.startswith("JacobiIterationKernel(") and top.calls == 1000
    assert top.total_us == pytest.approx(545275.480) and top.avg_us == pytest.approx(545.27548)
    assert top.extra == {}
    assert top.share_pct == pytest.approx(43.03, abs=0.01)  # the file's own Percentage column
    assert [k.calls for k in trace.kernels] == [1000, 1001, 1000, 1000, 1001, 1001, 1]
    assert trace.kernels[-1].name == "__amd_rocclr_fillBufferAligned"


def test_trace_preferred_over_stats_and_hip_api_stats_ignored(tmp_path):
    out = tmp_path / "out"
    place(out, DOCS_TRACE, "h/1/run_kernel_trace.csv")
    place(out, STATS, "h/1/run_kernel_stats.csv")
    place(out, HIP_API_STATS, "h/1/run_hip_api_stats.csv")
    trace = RocprofV3Profiler().parse(out)
    assert trace.kernels[0].name == ADD and trace.kernels[0].calls == 3


def test_hip_api_stats_alone_is_not_a_kernel_file(tmp_path):
    out = place(tmp_path / "out", HIP_API_STATS, "h/1/run_hip_api_stats.csv")
    with pytest.raises(ProfilerError, match=r"no rocprofv3 kernel CSV .*h/1/run_hip_api_stats.csv"):
        RocprofV3Profiler().parse(out)


def test_two_processes_are_summed(tmp_path):
    out = tmp_path / "out"
    place(out, DOCS_TRACE, "h/111/111_kernel_trace.csv")
    place(out, DOCS_TRACE, "h/222/222_kernel_trace.csv")
    trace = RocprofV3Profiler().parse(out)
    assert trace.kernels[0].calls == 6 and trace.kernels[0].total_us == pytest.approx(2 * 34.04)


def test_counter_collection_times_each_dispatch_once(tmp_path):
    out = place(tmp_path / "out", COUNTERS, "h/1/run_counter_collection.csv")
    trace = RocprofV3Profiler().parse(out)
    add = trace.kernels[0]
    assert add.name == ADD and add.calls == 1
    assert add.total_us == pytest.approx((3200098838483232 - 3200098838431081) / 1e3)
    assert add.extra["pmc_SQ_WAVES"] == 16384.0 and add.extra["arch_vgpr"] == 8.0


def test_target_gpu_time_on_a_rocprof_trace():
    trace = parse_rocprof_csv(DOCS_TRACE)
    assert target_gpu_time(trace, None) == (pytest.approx(34.04), [ADD])
    us, names = target_gpu_time(trace, "divide|multiply")
    assert us == pytest.approx(23.64 + 21.08) and len(names) == 2


# ---- errors --------------------------------------------------------------------------------

def test_no_csv_at_all(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "profile.log").write_text("")
    with pytest.raises(ProfilerError, match=r"no rocprofv3 kernel CSV.*profile.log"):
        RocprofV3Profiler().parse(tmp_path / "out")


def test_header_only_trace_says_no_kernel(tmp_path):
    # edit: the docs kernel trace with its data rows removed
    out = place(tmp_path / "out", DOCS_TRACE, "h/1/run_kernel_trace.csv",
                edit=lambda t: t.splitlines()[0] + "\n")
    with pytest.raises(ProfilerError, match="no kernel"):
        RocprofV3Profiler().parse(out)


def test_unknown_layout_names_file_and_columns(tmp_path):
    # edit: the docs kernel trace with its timestamp columns renamed
    out = place(tmp_path / "out", DOCS_TRACE, "h/1/run_kernel_trace.csv",
                edit=lambda t: t.replace('"Start_Timestamp"', '"Begin_Ns"').replace('"End_Timestamp"', '"Finish_Ns"'))
    with pytest.raises(ProfilerError) as err:
        RocprofV3Profiler().parse(out)
    text = str(err.value)
    assert "run_kernel_trace.csv" in text and "unknown rocprofv3 CSV layout" in text
    assert "Begin_Ns" in text and "Kernel_Name" in text


def test_empty_file_is_an_error(tmp_path):
    out = tmp_path / "out"
    (out / "h").mkdir(parents=True)
    (out / "h" / "run_kernel_trace.csv").write_text("")
    with pytest.raises(ProfilerError, match="run_kernel_trace.csv: empty file"):
        RocprofV3Profiler().parse(out)


def test_truncated_row_is_skipped_with_a_warning(tmp_path):
    # edit: the last data row of the docs kernel trace cut in half (a killed run)
    def cut(text: str) -> str:
        lines = text.rstrip("\n").splitlines()
        return "\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]) + "\n"

    out = place(tmp_path / "out", DOCS_TRACE, "h/1/run_kernel_trace.csv", edit=cut)
    trace = RocprofV3Profiler().parse(out)
    assert sum(k.calls for k in trace.kernels) == 8
    assert trace.warnings == ["run_kernel_trace.csv: 1 row(s) without usable times were skipped"]


def test_kernel_trace_keeps_each_dispatch_time_and_its_workgroup_shape():
    """Per-dispatch Start/End times (ns) feed the keep metric's launch groups (issue 15 item 4)."""
    t = parse_rocprof_csv(LEGACY_TRACE)
    add = next(k for k in t.kernels if k.name.startswith("void addition_kernel"))
    assert add.durations_us is not None and len(add.durations_us) == add.calls
    assert add.durations_us[0] == pytest.approx((8819330200116308 - 8819330200067564) / 1e3)
    assert add.launch_order == sorted(add.launch_order)
    g = next(g for g in t.groups if g.kernel == add.name)
    # Grid_Size_X/Y/Z count work-items: 1024 x 1024 work-items in 64 x 1 workgroups = 16 x 1024 workgroups
    assert g.grid == (16, 1024, 1) and g.block == (64, 1, 1) and g.calls == add.calls
    assert sum(x.calls for x in t.groups) == sum(k.calls for k in t.kernels)


def test_counter_collection_times_each_dispatch_once_in_its_group():
    t = parse_rocprof_csv(COUNTERS)
    assert t.groups and all(g.calls == 1 and g.block == (64, 1, 1) and g.grid == (16384, 1, 1) for g in t.groups)
    assert sum(g.total_us for g in t.groups) == pytest.approx(t.total_gpu_us)


def test_kernel_stats_have_no_per_dispatch_times():
    t = parse_rocprof_csv(STATS)
    assert t.groups is None and all(k.durations_us is None for k in t.kernels)


def test_rocprofv3_is_a_per_launch_profiler():
    assert RocprofV3Profiler().per_launch and "--kernel-trace" in RocprofV3Profiler().wrap("b", Path("/tmp/x"))
