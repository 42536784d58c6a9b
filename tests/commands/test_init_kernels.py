"""`kopt-mcp init`'s target kernels from one run under a profiler (kopt_mcp/commands/init/profiled.py
`kernel_regex`), replaying the recorded H100 do_bench trace: the kernels the repository defines
(kopt_mcp/bench/kernel_sources.py, tested in tests/bench/test_kernel_sources.py), else the hottest with a
warning."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from kopt_mcp.commands.init.profiled import kernel_regex
from kopt_mcp.profilers.cupti import parse_cupti_dir

DOBENCH = Path(__file__).parents[1] / "fixtures" / "cupti" / "h100_dobench" / "run0"


class _Replay:
    """CUPTI as the profiler of init's one profiled run, replaying the recorded do_bench trace."""

    name = "cupti"

    def available(self) -> bool:
        return True

    def wrap(self, command: str, out_dir: Path) -> str:
        return f"cp {DOBENCH}/*.json {out_dir}/ && {command}"

    def parse(self, out_dir: Path):
        return parse_cupti_dir(out_dir)


def test_kernel_regex_on_a_recorded_trace_takes_the_kernel_the_repository_defines(tmp_path):
    """The recorded trace's hottest kernel is a cuBLAS gemm; a repository that defines one of its
    other kernels (the RNG kernel's function, as a fork of torch would) gets that one."""
    trace = parse_cupti_dir(DOBENCH)
    rng = next(k.name for k in trace.kernels if "distribution_elementwise_grid_stride_kernel" in k.name)
    assert trace.kernels[0].name != rng
    (tmp_path / "rng.cu").write_text("__global__ void distribution_elementwise_grid_stride_kernel(int n) {}")
    regex, why = kernel_regex(tmp_path, "true", profiler=_Replay())
    assert regex == f"^{re.escape(rng)}$" and "1 kernel(s) this repository defines" in why and "cupti" in why
    shutil.rmtree(tmp_path)
    tmp_path.mkdir()
    regex, why = kernel_regex(tmp_path, "true", profiler=_Replay())  # defines none: the gemm, with a warning
    assert regex == f"^{re.escape(trace.kernels[0].name)}$" and "check it is yours" in why
