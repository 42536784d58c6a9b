"""fla-org/flash-linear-attention (LayerNorm backward with a persistent grid): its own module
benchmark, unmodified. `layer_norm_bwd` launches `NS = min(SMs, rows)` programs (132 on an H100)
for every sequence length: one launch shape for every config, the case harness units exist for.
Staging and the edits' reasoning: benchmarks/real_repos/README.md."""

from __future__ import annotations

from model import Candidate, Project

FLA_LN = "fla/modules/layernorm.py"
FLA_NS = "    NS = min(triton.cdiv(get_multiprocessor_count(x.device.index), G), T // G) * G\n"

FLA = Project(
    name="fla",
    github="fla-org/flash-linear-attention",
    paths=["fla", "benchmarks", "tests", "pyproject.toml", "setup.py", "README.md", "LICENSE", ".gitignore"],
    command="PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python benchmarks/modules/benchmark_layernorm.py",
    init_flags=[],
    toml='''# flash-linear-attention LayerNorm: the project's own module benchmark (triton.testing.perf_report,
# 16 providers x 8 sequence lengths), unmodified; it writes layernorm_benchmark/Performance.csv (ignored)
[benchmark]
command = "PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python benchmarks/modules/benchmark_layernorm.py"
csv = "layernorm_benchmark/Performance.csv"
format = "csv"
metric = "fused_ln_bwd (Execution Time (ms))"
higher_is_better = false
config_columns = ["T"]
timeout_s = 900

[correctness]
command = "PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python -m pytest -q -x -p no:cacheprovider tests/modules/test_layernorm.py -k 'test_groupnorm and not linear and not small_t'"
timeout_s = 900

[profiler]
kernel = "^layer_norm_(fwd|bwd)_kernel1?$"

[protect]
paths = ["benchmarks/", "tests/"]
''',
    candidates=[
        Candidate("identical", "tie", "a comment only", FLA_LN,
                  append="\n# kopt-mcp real-repository check: a comment, no code change\n"),
        Candidate("win", "improved",
                  "LayerNorm backward (D > 512): 4 programs per SM instead of 1 (more rows in flight)", FLA_LN,
                  old=FLA_NS,
                  new="    NS = min(triton.cdiv(get_multiprocessor_count(x.device.index) * (4 if D > 512 else 1), G), "
                      "T // G) * G\n"),
        Candidate("slowdown", "regressed", "backward on 1/8 of the SMs", FLA_LN, old=FLA_NS,
                  new="    NS = min(triton.cdiv(max(1, get_multiprocessor_count(x.device.index) // 8), G), T // G) * G\n"),
        Candidate("broken", "incorrect", "LayerNorm backward: the last column masked off", FLA_LN,
                  old="    mask = o_d < D\n", new="    mask = o_d < D - 1\n"),
    ],
)
