"""NcuProfiler.parse error cases: each is a ProfilerError naming the file and what to do."""

from __future__ import annotations

import pytest

from kopt_mcp.errors import ProfilerError
from kopt_mcp.profilers.ncu import NcuProfiler
from tests.profilers.conftest import DETAILS, RAW

HINT = "did the benchmark launch GPU kernels? is ncu allowed to read counters here?"


def _header_only(fixture):
    def edit(text):
        lines = text.splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
        keep = 2 if fixture is RAW else 1  # raw page: header + units row
        return "\n".join(lines[: start + keep]) + "\n"

    return edit


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(ProfilerError) as err:
        NcuProfiler().parse(tmp_path)
    assert str(tmp_path / "ncu.csv") in str(err.value)
    assert HINT in str(err.value)


def test_garbage_file_has_no_header(ncu_dir):
    out = ncu_dir(DETAILS, lambda t: "Starting...\nsegfault\n==ERROR== ERR_NVGPUCTRPERM\n")
    with pytest.raises(ProfilerError) as err:
        NcuProfiler().parse(out)
    message = str(err.value)
    assert str(out / "ncu.csv") in message
    assert "no ncu CSV header" in message and HINT in message
    assert "ERR_NVGPUCTRPERM" in message  # ncu's own error is passed on


@pytest.mark.parametrize("fixture", [RAW, DETAILS], ids=["raw", "details"])
def test_header_only_means_no_kernel_launched(ncu_dir, fixture):
    out = ncu_dir(fixture, _header_only(fixture))
    with pytest.raises(ProfilerError, match="launched no GPU kernel") as err:
        NcuProfiler().parse(out)
    assert str(out / "ncu.csv") in str(err.value)


def test_raw_page_without_time_column_lists_columns_found(ncu_dir):
    def drop_time(text):
        return text.replace("gpu__time_duration", "gpu__renamed_duration")

    out = ncu_dir(RAW, drop_time)
    with pytest.raises(ProfilerError, match="no GPU time column") as err:
        NcuProfiler().parse(out)
    message = str(err.value)
    assert str(out / "ncu.csv") in message
    assert "columns found: ID, Process ID" in message
    assert HINT in message


def test_details_page_without_duration_lists_metrics_found(ncu_dir):
    out = ncu_dir(DETAILS, lambda t: t.replace('"Duration"', '"Span"'))
    with pytest.raises(ProfilerError, match="no GPU time column") as err:
        NcuProfiler().parse(out)
    assert "metrics found: Memory Frequency, SOL FB" in str(err.value)


def test_unknown_time_unit_is_an_error_not_a_guess(ncu_dir):
    old = '"Duration","nsecond","8992"'
    out = ncu_dir(DETAILS, lambda t: t.replace(old, '"Duration","cycle","8992"'))
    with pytest.raises(ProfilerError, match="unknown unit 'cycle' for Duration"):
        NcuProfiler().parse(out)


def test_header_missing_kernel_name_column(ncu_dir):
    out = ncu_dir(RAW, lambda t: t.replace('"Kernel Name"', '"Function"'))
    with pytest.raises(ProfilerError, match="header lacks Kernel Name"):
        NcuProfiler().parse(out)
