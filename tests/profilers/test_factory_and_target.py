"""make_profiler choices, the no-op backend, and target_gpu_time on a parsed ncu trace."""

from __future__ import annotations

import pytest

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.trace import KernelTrace, target_gpu_time
from kopt_mcp.profilers import BACKENDS, NcuProfiler, NoProfiler, make_profiler
from tests.profilers.conftest import RAW


@pytest.fixture
def ncu_on_path(tmp_path, monkeypatch):
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.fixture
def no_ncu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))


def test_auto_picks_ncu_on_nvidia_with_ncu(ncu_on_path):
    profiler = make_profiler("auto", "nvidia", detail=True)
    assert isinstance(profiler, NcuProfiler) and profiler.name == "ncu" and profiler.detail


@pytest.mark.parametrize("vendor", ["amd", "none", "cpu"])
def test_auto_falls_back_to_none_off_nvidia(ncu_on_path, vendor):
    assert isinstance(make_profiler("auto", vendor), NoProfiler)


def test_auto_falls_back_to_none_without_ncu(no_ncu):
    assert isinstance(make_profiler("auto", "nvidia"), NoProfiler)


def test_explicit_ncu(ncu_on_path):
    assert isinstance(make_profiler("ncu", "nvidia"), NcuProfiler)


def test_explicit_ncu_missing_says_what_to_do(no_ncu):
    with pytest.raises(ProfilerError) as err:
        make_profiler("ncu", "nvidia")
    assert str(err.value) == (
        'ncu not found on PATH: install Nsight Compute or set [profiler] backend = "none"'
    )


def test_explicit_none(ncu_on_path):
    assert isinstance(make_profiler("none", "nvidia"), NoProfiler)


def test_unknown_backend_lists_the_valid_ones():
    with pytest.raises(ValueError) as err:
        make_profiler("nsys", "nvidia")
    for name in ("auto", "ncu", "none"):
        assert repr(name) in str(err.value)
    assert BACKENDS == ("auto", "cupti", "ncu", "rocprofv3", "none")


def test_no_profiler_passes_command_through_and_returns_empty_trace(tmp_path):
    profiler = NoProfiler()
    assert profiler.name == "none" and profiler.available()
    assert profiler.wrap("python b.py; echo 'x'", tmp_path) == "python b.py; echo 'x'"
    trace = profiler.parse(tmp_path)
    assert trace == KernelTrace(
        backend="none", kernels=[], total_gpu_us=0.0,
        warnings=["no profiler backend: the keep metric is the script metric"],
    )
    assert list(tmp_path.iterdir()) == []


def test_target_gpu_time_regex_sums_matching_kernels(ncu_dir):
    trace = NcuProfiler().parse(ncu_dir(RAW))
    us, names = target_gpu_time(trace, r"softmax|reduce_kernel")
    assert us == pytest.approx((165856 + 40960) / 1000)
    assert len(names) == 2 and "softmax_warp_forward" in names[0] and "reduce_kernel" in names[1]


def test_target_gpu_time_defaults_to_hottest(ncu_dir):
    trace = NcuProfiler().parse(ncu_dir(RAW))
    us, names = target_gpu_time(trace, None)
    assert us == pytest.approx(165.856) and len(names) == 1 and "softmax_warp_forward" in names[0]


def test_target_gpu_time_no_match_lists_kernels_seen(ncu_dir):
    trace = NcuProfiler().parse(ncu_dir(RAW))
    with pytest.raises(ProfilerError, match="no kernel matches") as err:
        target_gpu_time(trace, r"my_fused_kernel")
    assert "softmax_warp_forward" in str(err.value) and "nvjet_sm90" in str(err.value)


def test_target_gpu_time_on_empty_trace(tmp_path):
    with pytest.raises(ProfilerError, match="launched no GPU kernel"):
        target_gpu_time(NoProfiler().parse(tmp_path), None)
