"""`kopt-mcp init`: the proposed kopt.toml for real harness shapes (the appended-harness example,
the toy wide CSV, pytest-benchmark JSON, a printed table), and what it drops or flags."""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from kopt_mcp.app.cli import main
from kopt_mcp.commands.demo import prepare_repo
from kopt_mcp.commands.init.propose import InitError, Run, analyse, propose
from kopt_mcp.config import BenchmarkSection, TargetConfig, load_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "appended_harness"
FIX = Path(__file__).parents[1] / "fixtures" / "readers"


@pytest.fixture
def harness(tmp_path) -> Path:
    repo = prepare_repo(EXAMPLE, tmp_path / "repo")
    (repo / "kopt.toml").unlink()
    subprocess.run(["git", "commit", "-qam", "no config"], cwd=repo, check=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})
    return repo


def _status(repo: Path) -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout


def test_init_on_an_appended_long_csv_harness(harness):
    p = propose(harness, "python benchmark/benchmark_rms_norm.py --overwrite", profile=False)
    cfg = TargetConfig.model_validate(tomllib.loads(p.toml))
    b = cfg.benchmark
    assert (b.csv, b.format, b.metric, b.value_column) == ("data/all_benchmark_data.csv", "csv-long", "speed", "y_value_50")
    assert b.rows == "kernel_provider == 'ours'" and b.config_columns == ["x_value"]
    assert "metric = \"speed\"  # unit: ms" in p.toml
    # the tests init ran on the unmodified tree (kopt_mcp/commands/init/correctness.py), stopping at the first failure
    assert cfg.correctness.command == "python -m pytest -q -x -p no:cacheprovider tests/test_kernel.py"
    assert "# init ran this command on the unmodified tree: 5 passed" in p.toml
    assert "# comparison rows (read, never judged): kernel_provider == 'reference'" in p.toml
    assert cfg.protect.paths == ["benchmark/", "reference.py", "tests/"]  # kopt_mcp/commands/init/protect.py
    assert "timestamp" in p.toml and "kernel = " in p.toml  # never-config finding; the target kernel line
    assert _status(harness) == ""  # the tracked results file is put back as it was


def test_init_flags_a_harness_that_keeps_its_old_rows(harness):
    p = propose(harness, "python benchmark/benchmark_rms_norm.py", profile=False)
    assert "left every row unchanged (it keeps old rows): pass the benchmark's overwrite flag" in p.toml


def test_init_provider_flag_picks_the_rows_and_a_wrong_value_lists_the_values(harness):
    p = propose(harness, "python benchmark/benchmark_rms_norm.py --overwrite", provider="reference", profile=False)
    assert 'rows = "kernel_provider == \'reference\'"' in p.toml
    with pytest.raises(InitError, match=r"--provider 'triton'.*\['ours', 'reference'\]"):
        propose(harness, "python benchmark/benchmark_rms_norm.py --overwrite", provider="triton", profile=False)


def test_init_on_the_toy_wide_csv_writes_a_config_that_loads(toy_repo, capsys):
    (toy_repo / "kopt.toml").unlink()
    assert main(["init", "--repo", str(toy_repo), "--command", "python bench.py", "--write"]) == 0
    b = load_config(toy_repo / "kopt.toml").target.benchmark
    assert (b.csv, b.format, b.metric, b.config_columns, b.correctness_columns) == (
        "results/bench.csv", "auto", "us_per_call", ["n"], ["err_count"])
    assert not (toy_repo / "results" / "bench.csv").exists()  # created by init's runs, removed again
    assert main(["init", "--repo", str(toy_repo), "--command", "python bench.py", "--write"]) == 2
    assert "--force" in capsys.readouterr().err


def test_init_reads_pytest_benchmark_json_already_there(tmp_path):
    shutil.copy(FIX / "pytest_benchmark_2.5.json", tmp_path / "bench.json")
    p = propose(tmp_path, None, results="*.json", profile=False)
    assert 'format = "pytest-benchmark"' in p.toml and 'metric = "stats.median"  # unit: s' in p.toml
    assert 'config_columns = ["name"]' in p.toml
    assert '# command = "python my_benchmark.py"  # REQUIRED' in p.toml  # no command given: asked for


def test_init_on_liger_output_already_there_filters_provider_and_keeps_each_mode_a_class(tmp_path):
    (tmp_path / "data").mkdir()
    shutil.copy(FIX / "liger_all_benchmark_data_head.csv", tmp_path / "data" / "all_benchmark_data.csv")
    p = propose(tmp_path, None, results="data/*.csv", provider="liger", profile=False)
    # forward, backward and full are all the kernel's work: config classes, not a filter (the
    # hand-finished Liger-Kernel config counts every mode; init proposed forward only on the H100)
    assert 'rows = "kernel_provider == \'liger\'"' in p.toml
    assert 'config_columns = ["kernel_operation_mode", "x_value"]' in p.toml
    assert "each is a config class of its own (--mode NAME counts one)" in p.toml
    assert 'metric = "speed"  # unit: ms' in p.toml
    assert "chose 'speed' (--metric-name to change)" in p.toml
    one = propose(tmp_path, None, results="data/*.csv", provider="liger", mode="full", profile=False)
    assert 'rows = "kernel_provider == \'liger\' and kernel_operation_mode == \'full\'"' in one.toml
    assert 'config_columns = ["x_value"]' in one.toml


def test_init_without_command_or_results_says_what_to_pass(tmp_path):
    with pytest.raises(InitError, match="--command CMD"):
        propose(tmp_path, None)


def test_init_reads_a_printed_table_when_no_file_is_written(tmp_path):
    (tmp_path / "bench.py").write_text(
        "import random\nprint('softmax-performance:')\nprint('      N    Triton    Torch')\n"
        "for i, n in enumerate((256, 512)):\n"
        "    print(f'{i}  {n}.0  {100 + random.random():.6f}  {90 + random.random():.6f}')\n")
    p = propose(tmp_path, "python bench.py", profile=False)
    assert 'format = "stdout"' in p.toml and 'metric = "Triton"' in p.toml and 'config_columns = ["N"]' in p.toml
    assert "[protect]\npaths = [\"bench.py\"]" in p.toml


def test_init_on_flaggems_printed_table_takes_the_provider_named_latency(tmp_path):
    """FlagGems' pytest performance suite on the H100 (the recorded log): the table under a rule of
    dashes, one latency column per provider; --provider picks FlagGems' own."""
    shutil.copy(FIX / "flaggems_rms_norm_perf.log", tmp_path / "perf.log")
    p = propose(tmp_path, "cat perf.log", provider="gems", profile=False)
    assert 'format = "stdout"' in p.toml and 'metric = "Gems Latency (ms)"' in p.toml
    assert "higher_is_better = false" in p.toml and 'config_columns = ["Size Detail"]' in p.toml
    # without --provider: FlagGems' own, never torch, the reference (issue 25)
    plain = propose(tmp_path, "cat perf.log", profile=False)
    assert 'metric = "Gems Latency (ms)"' in plain.toml and "--provider NAME" in plain.toml
    assert "# comparison rows (read, never judged): column 'Torch Latency (ms)'" in plain.toml


def test_analyse_drops_columns_that_differ_between_two_identical_runs():
    def csv(seed: int, t: float) -> bytes:
        return f"M,seed,us,err\n1024,{seed},{t},0\n2048,{seed + 1},{t * 2},0\n".encode()

    runs = [Run(files={"out.csv": (None, csv(7, 10.5))}), Run(files={"out.csv": (csv(7, 10.5), csv(9, 10.7))})]
    keys, findings = analyse(runs)
    assert keys["config_columns"] == ["M"] and keys["metric"] == "us" and keys["correctness_columns"] == ["err"]
    assert any("['seed'] differ between two runs" in f for f in findings)


def test_target_kernel_regex_from_one_trace(tmp_path):
    """A real ncu log (recorded on an H200) stands in for the profiled run: the hottest kernel."""
    from kopt_mcp.commands.init.profiled import kernel_regex
    from kopt_mcp.profilers.ncu import NcuProfiler

    recorded = Path(__file__).parents[1] / "fixtures" / "ncu" / "h200_raw_page_torch_matmul_softmax.csv"

    class Replay(NcuProfiler):
        def available(self) -> bool:
            return True

        def wrap(self, command: str, out_dir: Path) -> str:
            return f"cp {recorded} {out_dir}/ncu.csv && {command}"

    regex, why = kernel_regex(tmp_path, "true", profiler=Replay())
    assert regex and regex.startswith("^") and "ncu" in why
    from kopt_mcp.profilers.ncu import parse_ncu_csv

    assert regex == "^" + __import__("re").escape(parse_ncu_csv(recorded).kernels[0].name) + "$"
    assert kernel_regex(tmp_path, "exit 3", profiler=Replay()) == (None, "the profiled run exited 3")


def test_init_reads_several_same_shaped_perf_report_files_as_one_glob(tmp_path):
    """triton-kernels' perf_report writes results/{fwd,bwd}/rms-norm.csv (GB/s, a column per provider)."""
    repo = tmp_path / "repo"
    for mode in ("fwd", "bwd"):
        (repo / "results" / mode).mkdir(parents=True)
        shutil.copy(FIX / "triton_perf_report_rms_norm.csv", repo / "results" / mode / "rms-norm.csv")
    p = propose(repo, None, results="results/*/rms-norm.csv", profile=False)
    raw = tomllib.loads(p.toml)
    raw["benchmark"]["command"] = "python benchmarks/rms_norm.py"  # commented out: --results ran nothing
    b = BenchmarkSection(**raw["benchmark"])
    assert (b.csv, b.metric, b.higher_is_better) == ("results/*/rms-norm.csv", "triton (GB/s)", True)
    assert b.config_columns == ["seq_len"]  # "torch (GB/s)", "torch_compile (GB/s)": measurements
    assert "reading them all as 'results/*/rms-norm.csv'" in p.toml


@pytest.mark.parametrize("metric, higher", [("triton (GB/s)", True), ("TFLOP/s", True), ("tokens/s", True),
                                            ("gbps", True), ("samples/sec", True), ("ms/step", False), ("ms", False), ("us_per_call", False)])
def test_rates_per_second_are_higher_is_better(metric, higher):
    from kopt_mcp.commands.init.propose import HIGHER_IS_BETTER

    assert bool(HIGHER_IS_BETTER.search(metric)) is higher


def test_a_failed_run_through_an_installed_copy_of_the_package_says_to_put_the_sources_first(tmp_path):
    from kopt_mcp.commands.init.propose import installed_copy_hint

    log = (ROOT / "tests" / "fixtures" / "init" / "liger_installed_copy.log").read_text()
    (tmp_path / "src" / "liger_kernel").mkdir(parents=True)
    (tmp_path / "src" / "liger_kernel" / "__init__.py").write_text("")
    hint = installed_copy_hint(tmp_path, log)
    assert "imported liger_kernel from /tmp/site, not from this repository's src/liger_kernel" in hint
    assert "`PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} <command>`" in hint
    assert "repository's ./liger_kernel" in installed_copy_hint(tmp_path / "src", log)  # a flat layout
    (tmp_path / "other").mkdir()
    assert installed_copy_hint(tmp_path / "other", log) == ""  # no package of that name here: no hint


def _touch(root, *paths):
    for p in paths:
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_text("")


def test_the_correctness_proposal_skips_performance_suites_and_keeps_to_the_benchmarks_topic(tmp_path):
    from kopt_mcp.commands.init.propose import benchmark_files, find_test_files
    from kopt_mcp.commands.init.propose import correctness_tests as chosen

    def correctness_tests(repo, command, kernel=None):
        return chosen(find_test_files(repo), benchmark_files(repo, command), kernel)

    # FlagGems' layout (532ff43): pytest performance suites under benchmark/, op tests under tests/.
    # On the H100 (2026-11-24) init proposed `pytest benchmark/test_attention_perf.py ...`.
    fg = tmp_path / "fg"
    _touch(fg, "benchmark/test_norm_perf.py", "benchmark/test_blas_perf.py", "tests/test_norm_ops.py",
           "tests/test_blas_ops.py", "tests/test_attention_ops.py")
    cmd = "python -m pytest -s benchmark/test_norm_perf.py -m rms_norm --level core"
    assert correctness_tests(fg, cmd) == ["tests/test_norm_ops.py"]
    assert correctness_tests(fg, cmd, kernel="blas") == ["tests/test_blas_ops.py"]
    # triton-kernels' layout (d068688): a benchmark script and tests named after the op
    tk = tmp_path / "tk"
    _touch(tk, "benchmarks/rms_norm.py", "tests/test_rms_norm.py", "tests/test_layer_norm.py", "bench_utils_test.py")
    assert correctness_tests(tk, "python benchmarks/rms_norm.py") == ["tests/test_rms_norm.py"]
    # no topic match: every test that is not a performance suite
    assert correctness_tests(tk, "python run_all.py") == ["tests/test_layer_norm.py", "tests/test_rms_norm.py"]


def test_a_benchmark_run_through_python_c_is_protected_and_its_environment_reaches_the_tests(harness):
    """triton-kernels' finished command (torch 2.11 needs donated_buffer off) runs the benchmark through
    `python -c "...runpy.run_path('benchmarks/rms_norm.py')"`: on the H100 (2026-11-24) init left that
    script unprotected and proposed a correctness command without the benchmark's PYTHONPATH."""
    from kopt_mcp.commands.init.propose import benchmark_files, env_prefix

    cmd = ("PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python -c \"import runpy, sys; sys.argv[1:] = ['--overwrite']; "
           "runpy.run_path('benchmark/benchmark_rms_norm.py', run_name='__main__')\"")
    assert benchmark_files(harness, cmd) == ["benchmark/benchmark_rms_norm.py"]
    assert env_prefix(cmd) == "PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} "
    assert env_prefix('A=1 B="x y" python b.py') == 'A=1 B="x y" ' and env_prefix("python b.py") == ""
    cfg = TargetConfig.model_validate(tomllib.loads(propose(harness, cmd, profile=False).toml))
    assert cfg.correctness.command == ("PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python -m pytest -q -x -p no:cacheprovider "
                                       "tests/test_kernel.py")
    assert "benchmark/" in cfg.protect.paths  # the folder of the script it runs


def _pytest_benchmark_runs(groups: dict[str | None, list[str]]) -> list[Run]:
    """One pytest-benchmark JSON (the 2.5 fixture's shape) with a benchmark per name, in its group."""
    import copy
    import json

    data = json.loads((FIX / "pytest_benchmark_2.5.json").read_text())
    one, data["benchmarks"] = data["benchmarks"][0], []
    for i, (group, names) in enumerate((g, n) for g, ns in groups.items() for n in ns):
        b = copy.deepcopy(one)
        b.update(group=group, name=names, fullname=f"tests/bench.py::{names}")
        b["stats"]["median"] = 0.001 * (i + 1)
        data["benchmarks"].append(b)
    return [Run(files={"bench.json": (None, json.dumps(data).encode())})]


def test_kernel_picks_a_pytest_benchmark_group_and_refuses_a_kernel_no_row_names():
    """An agent's pytest-benchmark harness for two kernels (issue 35): --kernel layer_norm was silently
    ignored and both kernels counted; pytest-benchmark's `group` column names the kernel."""
    runs = _pytest_benchmark_runs({"layer_norm": ["test_ln[64]", "test_ln[128]"], "rms_norm": ["test_rms[64]"]})
    keys, _ = analyse(runs, kernel="layer_norm")
    assert keys["format"] == "pytest-benchmark" and keys["rows"] == "group == 'layer_norm'"
    # without a group: the rows whose name holds the kernel
    runs = _pytest_benchmark_runs({None: ["test_layer_norm[64]", "test_layer_norm[128]", "test_rms_norm[64]"]})
    keys, findings = analyse(runs, kernel="layer_norm")
    assert keys["rows"] == "`name`.str.contains('layer_norm', case=False, regex=False)"
    assert any("(2 of 3)" in f for f in findings)
    with pytest.raises(InitError, match="--kernel 'swiglu' names no row"):
        analyse(runs, kernel="swiglu")
