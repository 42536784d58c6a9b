"""NcuProfiler.wrap (the command line) and available(), and short_kernel_name."""

from __future__ import annotations

import csv
import shlex
import stat
import subprocess
import sys

import pytest

from kopt_mcp.evidence.names import short_kernel_name
from kopt_mcp.profilers.ncu import DETAIL_METRICS, TIMING_METRICS, NcuProfiler
from tests.profilers.conftest import RAW

NASTY = """python bench.py --name 'a b' --sep ";" && echo "done; $HOME" | tee log.txt"""


def _metrics(argv: list[str]) -> list[str]:
    return argv[argv.index("--metrics") + 1].split(",")


def test_wrap_runs_command_under_ncu_with_clocks_untouched(tmp_path):
    argv = shlex.split(NcuProfiler().wrap(NASTY, tmp_path / "run 1"))
    assert argv[0] == "ncu"
    assert argv[argv.index("--clock-control") + 1] == "none"
    assert argv[argv.index("--target-processes") + 1] == "all"
    assert "--csv" in argv and argv[argv.index("--page") + 1] == "raw"
    assert argv[argv.index("--log-file") + 1] == str(tmp_path / "run 1" / "ncu.csv")
    assert argv[-3:] == ["bash", "-c", NASTY]  # quotes and semicolons survive intact


def test_wrap_metrics_timing_vs_detail(tmp_path):
    timing = _metrics(shlex.split(NcuProfiler().wrap("true", tmp_path)))
    detail = _metrics(shlex.split(NcuProfiler(detail=True).wrap("true", tmp_path)))
    assert timing == list(TIMING_METRICS)
    assert "gpu__time_duration.sum" in timing
    assert not set(DETAIL_METRICS) & set(timing)
    assert detail == list(TIMING_METRICS) + list(DETAIL_METRICS)


def test_every_requested_metric_is_a_real_ncu_metric_name():
    header = next(ln for ln in RAW.read_text().splitlines() if ln.startswith('"ID"'))
    columns = set(next(csv.reader([header])))
    assert set(TIMING_METRICS + DETAIL_METRICS) <= columns


def test_wrapped_command_really_runs_through_bash(tmp_path):
    # A stand-in "ncu" that drops its own options and execs what follows --log-file <path>.
    fake = tmp_path / "fake-ncu"
    fake.write_text(
        f"#!{sys.executable}\nimport os, sys\nargs = sys.argv[1:]\n"
        "rest = args[args.index('--log-file') + 2:]\nos.execvp(rest[0], rest)\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    command = """printf '%s\\n' "a;b" 'c "d"' > out.txt; echo $((1+2)) >> out.txt"""
    wrapped = NcuProfiler(binary=str(fake)).wrap(command, tmp_path)
    subprocess.run(["bash", "-c", wrapped], cwd=tmp_path, check=True, timeout=30)
    assert (tmp_path / "out.txt").read_text() == 'a;b\nc "d"\n3\n'


def test_available_follows_path(tmp_path, monkeypatch):
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert NcuProfiler().available()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert not NcuProfiler().available()
    assert NcuProfiler(binary=str(fake)).available()


@pytest.mark.parametrize(
    ("fragment", "short"),
    [
        ("softmax_warp_forward", "softmax_warp_forward"),
        ("distribution_elementwise", "at::distribution_elementwise_grid_stride_kernel"),
        ("reduce_kernel", "at::reduce_kernel"),
        ("unrolled_elementwise", "at::unrolled_elementwise_kernel"),
        ("nvjet_sm90", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT"),
    ],
)
def test_short_names_of_the_recorded_pytorch_kernels(ncu_dir, fragment, short):
    trace = NcuProfiler().parse(ncu_dir(RAW))
    (name,) = [k.name for k in trace.kernels if fragment in k.name]
    assert short_kernel_name(name) == short
    assert len(short_kernel_name(name)) <= 80


def test_short_name_details_page_and_edge_cases():
    assert short_kernel_name("cuda_compute_flux(int,int*,float*,float*,float*)") == "cuda_compute_flux"
    assert short_kernel_name("void ns::F<int>::operator()(int)") == "ns::F::operator()"
    assert short_kernel_name("void a::b<decltype(x->y), 3>(int)") == "a::b"
    long = "k" * 200
    assert short_kernel_name(long) == "k" * 77 + "..."
    assert short_kernel_name("triton_poi_fused_add_0") == "triton_poi_fused_add_0"
