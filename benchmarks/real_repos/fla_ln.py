"""fla-org/flash-linear-attention's LayerNorm backward (a persistent grid) with its own module benchmark
narrowed to that kernel's provider: a second project besides Liger-Kernel whose target kernel launches
the same grid for every config (issue 34), one plain run about 30 s on the H200 (fla.py's whole
benchmark: 281 s).

The kernel: `layer_norm_bwd` launches `NS = min(cdiv(SMs, G), T // G) * G` programs (132 on an H100 or
H200 for every benchmark size: 2048..262144 rows of D = 1024), each looping over its rows one at a
time in `layer_norm_bwd_kernel1` (D > 512) and writing one fp32 partial row of dW and dB; torch then
sums the NS partial rows (`dw.view(G, -1, D).sum(1)`, a `reduce_kernel`).

The benchmark: `benchmarks/modules/benchmark_layernorm.py` has 16 providers and takes no arguments;
kopt.toml's command imports it (not as __main__), keeps the Benchmark's provider list to
`fused_ln_bwd` (FLA's LayerNorm forward + backward, `norm(x).backward(x)`, D = 1024, B = 16, bf16) and
hands it to the project's own runner (benchmarks/modules/runner.py), as the script's `__main__` does:
the benchmark function, its sizes (T = 128..16384) and do_bench are upstream's. Staged as `p5`
(the same snapshot as fla.py: .devstage/src/p5, p5.sha; einops in .devstage/whl).

Measured on the H200 (2026-12-02, torch 2.11, Triton 3.6; benchmarks/results/2026-12-02-h200-fla-ln-probe.md):
one plain run 34.5 s (first, autotuning) and 28.5 s; per forward + backward call (torch profiler,
us) the backward kernel is latency-bound (1693 us at T = 16384: 1.6 GB moved, ~0.9 TB/s), so more
programs per SM speed it up, at the price of a larger partial-sum reduction:

| NS | bwd kernel T=128 / 2048 / 16384 | reduce | whole call T=128 / 2048 / 16384 |
|---|---|---|---|
| SMs (upstream) | 10.3 / 215.3 / 1692.6 | 8.1-8.6 | 28.0 / 307.4 / 2325.1 |
| SMs // 8 (`slowdown`) | 70.5 / 1642.2 / 12994.6 | 5.2 | 85.5 / 1731.4 / 13625.5 |
| 2 x SMs (`win`) | 6.4 / 119.3 / 921.7 | 12.1-12.7 | 28.1 / 215.7 / 1559.1 |
| 4 x SMs (`more-programs`) | 4.9 / 71.6 / 540.9 | 20.3-21.1 | 34.8 / 177.1 / 1187.8 |
| 16 x SMs | 6.6 / 50.9 / 365.4 | 14.7-18.2 | 33.2 / 154.8 / 1009.8 |

The script's own column is host-bound below T = 16384 (1.08-1.35 ms per call for every T up to 8192,
run to run +-20%): its numbers move with the CPU, the GPU kernel time is what decides.
"""

from __future__ import annotations

from fla import FLA_LN, FLA_NS
from model import Candidate, Project

#: the provider kept: FLA's LayerNorm forward + backward (the persistent backward's path at D = 1024)
FLA_LN_PROVIDER = "fused_ln_bwd"
# imports the benchmark module without running it, keeps one provider, then runs it as its __main__ does
FLA_LN_NARROW = ("from benchmarks.modules import benchmark_layernorm as m, runner; b = m.benchmark.benchmarks; "
                 f"b.line_vals = b.line_names = ['{FLA_LN_PROVIDER}']; "
                 "runner.run_module_benchmark(m.benchmark, script_file=m.__file__)")
FLA_LN_COMMAND = f'PYTHONPATH=.${{PYTHONPATH:+:$PYTHONPATH}} python -c "{FLA_LN_NARROW}"'
FLA_LN_KERNEL1_MASK = "    mask = o_d < D\n"  # layer_norm_bwd_kernel1 (D > 512); the D <= 512 kernel names it m_d


def ns_times(factor: str) -> str:
    """The NS line with `factor` programs per SM (an expression in get_multiprocessor_count's value)."""
    return FLA_NS.replace("get_multiprocessor_count(x.device.index)",
                          f"get_multiprocessor_count(x.device.index) * {factor}")


FLA_LN_TOML = r"""# flash-linear-attention LayerNorm backward (persistent grid: NS = SM count for every T): the project's
# own module benchmark, benchmarks/modules/benchmark_layernorm.py, narrowed to its fused_ln_bwd provider.
# The script takes no arguments (16 providers x 8 sizes, 281 s on the H200): the command imports it,
# keeps one provider and runs it through the project's runner as the script's __main__ does (about 30 s).
# It writes layernorm_benchmark/Performance.csv (ignored by git): T, one column per provider kept.
[benchmark]
command = "PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python -c \"from benchmarks.modules import benchmark_layernorm as m, runner; b = m.benchmark.benchmarks; b.line_vals = b.line_names = ['fused_ln_bwd']; runner.run_module_benchmark(m.benchmark, script_file=m.__file__)\""
csv = "layernorm_benchmark/Performance.csv"
format = "csv"
metric = "fused_ln_bwd (Execution Time (ms))"
higher_is_better = false
config_columns = ["T"]
timeout_s = 300

[correctness]
# test_groupnorm is the file's test of layer_norm_bwd_kernel1 (G = 1, D = 1024 and 2048: rows over 512);
# test_layernorm's D (50..128) runs only the D <= 512 kernel. Its 20 cases took 128-150 s on the H200
# (each new D, G autotunes and compiles): the 8 with D = 1024 or 2048 (ids [is_rms_norm-G-D-T-B]) keep
# both backward kernels (G = 1: kernel1; G = 4: 256 and 512 per group, the D <= 512 kernel)
command = "PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python -m pytest -q -x -p no:cacheprovider tests/modules/test_layernorm.py -k 'test_groupnorm and not linear and not small_t and (1024 or 2048)'"
timeout_s = 600

[profiler]
kernel = "^layer_norm_bwd_kernel1?$"

[protect]
paths = ["benchmarks/", "tests/"]
"""

FLA_LN_PROJECT = Project(
    name="fla-ln",
    github="fla-org/flash-linear-attention",
    paths=["fla", "benchmarks", "tests", "pyproject.toml", "setup.py", "README.md", "LICENSE", ".gitignore"],
    command="PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python benchmarks/modules/benchmark_layernorm.py",
    init_flags=[],
    # the documented command runs all 16 providers (281 s): init gets the narrowed one kopt.toml runs
    init_with_toml_command=True,
    toml=FLA_LN_TOML,
    candidates=[
        Candidate("identical", "tie", "a comment only", FLA_LN,
                  append="\n# kopt-mcp real-repository check: a comment, no code change\n"),
        # H200 probe: backward kernel -38..-46% at every T (fewer rows per program, two programs' loads in
        # flight per SM), reduce +4 us; whole call -22..-33% from T = 512 on, T = 128 flat (28.0 -> 28.1 us)
        Candidate("win", "improved", "LayerNorm backward: 2 programs per SM instead of 1 (the persistent loop is "
                  "latency-bound: twice the rows in flight, 2 x SMs partial rows of dW/dB to sum)", FLA_LN,
                  old=FLA_NS, new=ns_times("2")),
        # H200 probe: backward kernel -52..-68%, but torch's sum over 4 x SMs partial rows 8 -> 21 us: the whole
        # call of T = 128 went 28.0 -> 34.8 us (+24%) while T >= 512 gained: a trade-off between config classes
        Candidate("more-programs", "divergent", "LayerNorm backward: 4 programs per SM (more rows in flight; "
                  "the dW/dB partial-sum reduction grows 4x)", FLA_LN, old=FLA_NS, new=ns_times("4"), after_keep=(ns_times("2"),)),
        # H200 probe: backward kernel 6.9-7.7x slower at every T
        Candidate("slowdown", "regressed", "LayerNorm backward on 1/8 of the SMs", FLA_LN, old=FLA_NS,
                  new="    NS = min(triton.cdiv(max(1, get_multiprocessor_count(x.device.index) // 8), G), T // G) * G\n",
                  after_keep=(ns_times("2"),)),
        Candidate("broken", "incorrect", "LayerNorm backward (D > 512): the last column masked off (dx's last "
                  "column never written)", FLA_LN, old=FLA_LN_KERNEL1_MASK, new="    mask = o_d < D - 1\n"),
    ],
)
