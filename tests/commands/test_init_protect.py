"""The `[protect] paths` init proposes (kopt_mcp/commands/init/protect.py): the harness's whole folders, so a
candidate cannot edit the timer or the tolerance in a helper file the command does not name.

The layouts are those of the fetched projects (benchmarks/real_repos/projects.py): FlagGems 532ff43,
Liger-Kernel ead96b6, triton-kernels d068688. On the H100 (2026-11-24) init protected FlagGems'
named test files only, leaving benchmark/performance_utils.py and tests/accuracy_utils.py editable."""

from __future__ import annotations

from pathlib import Path

from kopt_mcp.commands.init.propose import find_test_files
from kopt_mcp.commands.init.protect import protected_paths
from kopt_mcp.rules.protect import touched_protected

JIT = "import triton\n\n@triton.jit\ndef rms_norm_kernel(X):\n    pass\n"


def _repo(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_flaggems_harness_helpers_are_protected_with_their_folders(tmp_path):
    repo = _repo(tmp_path, {"benchmark/test_norm_perf.py": "", "benchmark/performance_utils.py": "",
                            "benchmark/conftest.py": "", "tests/test_norm_ops.py": "", "tests/accuracy_utils.py": "",
                            "src/flag_gems/ops/rms_norm.py": JIT, "pytest.ini": "[pytest]\n",
                            "tests/test_libentry.py": JIT})  # a test's own kernel keeps tests/ protected
    paths = protected_paths(repo, ["benchmark/test_norm_perf.py"], find_test_files(repo), [])
    assert paths == ["benchmark/", "pytest.ini", "tests/"]
    # the edits that the file list let through are now caught by the referee's protect rule
    assert touched_protected(["benchmark/performance_utils.py", "tests/accuracy_utils.py",
                              "src/flag_gems/ops/rms_norm.py"], paths) == ["benchmark/performance_utils.py",
                                                                           "tests/accuracy_utils.py"]


def test_liger_tests_share_their_top_level_folder_and_the_results_folder_stays_writable(tmp_path):
    repo = _repo(tmp_path, {"benchmark/scripts/benchmark_rms_norm.py": "", "benchmark/scripts/utils.py": "",
                            "benchmark/data/all_benchmark_data.csv": "", "test/transformers/test_rms_norm.py": "",
                            "test/utils.py": "", "src/liger_kernel/ops/rms_norm.py": JIT})
    written = {"benchmark/data/all_benchmark_data.csv"}
    paths = protected_paths(repo, ["benchmark/scripts/benchmark_rms_norm.py"], find_test_files(repo), [], written)
    assert paths == ["benchmark/scripts/", "test/"]


def test_a_folder_the_benchmark_writes_into_or_that_holds_kernels_protects_files_only(tmp_path):
    repo = _repo(tmp_path, {"bench/run.py": "", "bench/out.csv": "", "kernels/bench_k.py": "",
                            "kernels/k.py": JIT, "kernels/test_k.py": "", "bench.py": "", "test_top.py": ""})
    tests = find_test_files(repo)
    assert protected_paths(repo, ["bench/run.py"], tests, [], {"bench/out.csv"}) == \
        ["bench/run.py", "kernels/test_k.py", "test_top.py"]
    assert protected_paths(repo, ["kernels/bench_k.py", "bench.py"], [], ["reference.py"]) == \
        ["bench.py", "kernels/bench_k.py", "reference.py"]  # the root and a kernel folder stay editable


def test_every_file_that_configures_the_test_runner_is_protected(tmp_path):
    """A pytest-benchmark harness (issue 35): pyproject.toml's [tool.pytest.ini_options] steers both the
    benchmark and the tests; a pyproject.toml without pytest's section stays editable."""
    repo = _repo(tmp_path, {"kern/k.py": JIT, "kern/conftest.py": "", "kern/bench_k.py": "",
                            "tests/test_k.py": "", "tests/conftest.py": "",
                            "pyproject.toml": "[project]\nname = 'k'\n\n[tool.pytest.ini_options]\naddopts = '-q'\n",
                            "setup.cfg": "[tool:pytest]\naddopts = -q\n", "tox.ini": "[tox]\nenvlist = py311\n"})
    paths = protected_paths(repo, ["kern/bench_k.py"], find_test_files(repo), [])
    assert paths == ["kern/bench_k.py", "kern/conftest.py", "pyproject.toml", "setup.cfg", "tests/"]
    (repo / "pyproject.toml").write_text("[project]\nname = 'k'\n")
    (repo / "tox.ini").write_text("[pytest]\naddopts = -q\n")
    paths = protected_paths(repo, ["kern/bench_k.py"], find_test_files(repo), [])
    assert paths == ["kern/bench_k.py", "kern/conftest.py", "setup.cfg", "tests/", "tox.ini"]
