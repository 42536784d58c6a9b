"""The correctness command `kopt-mcp init` proposes is one it ran (kopt_mcp/commands/init/correctness.py):
pytest's own report read back (recorded runs: tests/fixtures/init/pytest_*), what failed on the
unmodified tree dropped with why, and real pytest runs in a planted repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kopt_mcp.commands.init.correctness import (
    _group,
    check_correctness,
    command_text,
    why_dropped,
)
from kopt_mcp.commands.init.pytest_report import (
    parse_junit,
    parse_progress,
    running_test,
    summary_line,
)
from kopt_mcp.commands.init.test_files import correctness_tests, selection
from kopt_mcp.errors import InitError

FIX = Path(__file__).parents[1] / "fixtures" / "init"
NORM = "tests/test_norm.py"


def test_the_junit_report_gives_node_ids_and_outcomes():
    got = {o.nodeid: o.outcome for o in parse_junit((FIX / "pytest_junit_xunit1.xml").read_text())}
    assert got == {
        "tests/multi/test_cute.py": "collection_error",
        f"{NORM}::test_rows_sum_to_one": "passed", f"{NORM}::test_shapes[1]": "passed",
        f"{NORM}::test_shapes[2]": "passed", f"{NORM}::test_shapes[3]": "failed",
        f"{NORM}::TestWeights::test_identity": "passed", f"{NORM}::test_eight_devices": "skipped",
        f"{NORM}::test_sharded[4]": "xfailed", f"{NORM}::test_spawned[2]": "failed",
        f"{NORM}::test_needs_cache": "error"}
    assert summary_line((FIX / "pytest_verbose_run.log").read_text()) == (
        "2 failed, 4 passed, 1 skipped, 1 xfailed, 2 errors in 2.56s")


def test_a_killed_run_is_read_from_its_progress_lines():
    done = parse_progress((FIX / "pytest_verbose_killed.log").read_text())
    assert [o.nodeid for o in done][-2:] == [f"{NORM}::test_needs_cache", "tests/test_slow.py::test_fast"]
    assert {o.nodeid: o.outcome for o in done}[f"{NORM}::test_sharded[4]"] == "xfailed"
    assert "tests/test_slow.py::test_slow" not in {o.nodeid for o in done}  # killed inside it
    assert running_test((FIX / "pytest_verbose_killed.log").read_text()) == "tests/test_slow.py::test_slow"
    assert running_test((FIX / "pytest_verbose_run.log").read_text()) is None


def test_every_failure_of_the_unmodified_tree_is_dropped_with_why():
    outcomes = parse_junit((FIX / "pytest_junit_xunit1.xml").read_text())
    drops = {o.nodeid: why_dropped(o, gpus=1, own_packages={"tinynorm"}) for o in outcomes}
    kinds = {k: (d.kind if d else None) for k, d in drops.items()}
    assert kinds == {
        "tests/multi/test_cute.py": "missing package", f"{NORM}::test_rows_sum_to_one": None,
        f"{NORM}::test_shapes[1]": None, f"{NORM}::test_shapes[2]": None, f"{NORM}::test_shapes[3]": "failure",
        f"{NORM}::TestWeights::test_identity": None, f"{NORM}::test_eight_devices": None,  # a skip costs nothing
        f"{NORM}::test_sharded[4]": "needs more GPUs",  # an xfail for a multi-GPU host still runs
        f"{NORM}::test_spawned[2]": "needs more GPUs", f"{NORM}::test_needs_cache": "failure"}
    assert "cutlass_dsl_missing_pkg is not installed" in drops["tests/multi/test_cute.py"].detail
    assert "shape 3 mismatched" in drops[f"{NORM}::test_shapes[3]"].detail
    assert "this machine has 1 GPU(s)" in drops[f"{NORM}::test_spawned[2]"].detail
    grouped = {d.target: d.kind for d in _group(outcomes, [d for d in drops.values() if d])}
    # a function whose every case failed is one --deselect prefix; test_shapes' other cases passed
    assert grouped == {"tests/multi/test_cute.py": "missing package", f"{NORM}::test_shapes[3]": "failure",
                       f"{NORM}::test_sharded": "needs more GPUs", f"{NORM}::test_spawned": "needs more GPUs",
                       f"{NORM}::test_needs_cache": "failure"}


def test_the_repositorys_own_package_not_importing_is_an_import_error_that_says_pythonpath():
    outcomes = parse_junit((FIX / "pytest_junit_xunit1.xml").read_text())
    cute = next(o for o in outcomes if o.outcome == "collection_error")
    d = why_dropped(cute, 0, {"cutlass_dsl_missing_pkg"})
    assert d.kind == "import error" and "PYTHONPATH=src" in d.detail


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


PLANTED = {
    "tests/test_rms_norm.py": (
        "import multiprocessing as mp\nimport pytest\n\n"
        "def test_matches_reference():\n    assert 1 + 1 == 2\n\n"
        "@pytest.mark.parametrize('h', [8, 16])\ndef test_hidden(h):\n    assert h in (8, 16)\n\n"
        "def _rank(r):\n    if r:\n        raise RuntimeError(f'invalid device ordinal {r}')\n\n"
        "@pytest.mark.parametrize('world_size', [2])\ndef test_sharded(world_size):\n"
        "    ps = [mp.get_context('spawn').Process(target=_rank, args=(r,)) for r in range(world_size)]\n"
        "    [p.start() for p in ps]\n    [p.join() for p in ps]\n"
        "    assert [p.exitcode for p in ps] == [0] * world_size\n"),
    "tests/cute/test_rms_norm.py": "import no_such_dsl_package_xyz\n\ndef test_cute():\n    pass\n",
    "tests/legacy/test_rms_norm.py": "def test_broken():\n    assert 0.5 == 1.0, 'off by half'\n",
    "tests/test_softmax.py": "def test_softmax():\n    pass\n",
    "tests/test_fused_add_rms_norm.py": "def test_fused():\n    pass\n",
    # packages, as Liger-Kernel's test folders are: same-named files in two folders import apart
    "tests/__init__.py": "", "tests/cute/__init__.py": "", "tests/legacy/__init__.py": "",
}


def test_init_runs_the_tests_and_proposes_only_what_passes(tmp_path):
    _write(tmp_path, PLANTED)
    # Liger-Kernel's layout: one test_rms_norm.py per backend folder; test_fused_add_rms_norm.py is another kernel's
    files = correctness_tests(sorted(k for k in PLANTED if k.endswith("py") and "__init__" not in k),
                              ["benchmark/benchmark_rms_norm.py"])
    assert files == ["tests/cute/test_rms_norm.py", "tests/legacy/test_rms_norm.py", "tests/test_rms_norm.py"]
    checked = check_correctness(tmp_path, "", sys.executable, files, [], timeout_s=300, gpus=1)
    assert {(d.target, d.kind) for d in checked.drops} == {
        ("tests/legacy/test_rms_norm.py", "failure"), ("tests/cute/test_rms_norm.py", "missing package"),
        ("tests/test_rms_norm.py::test_sharded", "needs more GPUs")}
    assert checked.ran and checked.summary == "3 passed"
    assert checked.command == (f"{sys.executable} -m pytest -q -x -p no:cacheprovider tests/test_rms_norm.py "
                               "--deselect tests/test_rms_norm.py::test_sharded")
    # one run (issue 35: one test run): every test the command keeps ran in it to the end and passed
    assert checked.runs == 1 and "2 whole file(s)" in checked.within and "1 failing or slow" in checked.within
    # and the proposed command passes as written
    assert subprocess.run(checked.command, shell=True, cwd=tmp_path, capture_output=True).returncode == 0


MULTI_HOST_XFAIL = (
    "import pathlib\nimport pytest\n\n"
    "def test_small():\n    pass\n\n"
    "@pytest.mark.xfail(True, reason='Pending multi-GPU host support.')\n"
    "@pytest.mark.parametrize('world_size', [4, 8])\ndef test_dtensor(world_size):\n"
    "    pathlib.Path(f'ran-{world_size}').touch()\n    assert False\n\n"
    "@pytest.mark.xfail(reason='known rounding issue')\ndef test_other_xfail():\n"
    "    pathlib.Path('ran-other').touch()\n    assert False\n")


def test_an_xfail_for_a_multi_gpu_host_is_deselected_before_it_runs(tmp_path):
    """Liger-Kernel's test_dtensor_rms_norm (xfail while device_count() < 8) took 146 s of init's
    151 s test run on one H200: init's plugin deselects it at collection, so it never runs."""
    _write(tmp_path, {"tests/test_rms_norm.py": MULTI_HOST_XFAIL})
    checked = check_correctness(tmp_path, "", sys.executable, ["tests/test_rms_norm.py"], [], timeout_s=300, gpus=1)
    assert not list(tmp_path.glob("ran-[48]"))  # neither case ran
    assert (tmp_path / "ran-other").exists()  # an xfail for another reason runs and stays, as before
    assert [(d.target, d.kind) for d in checked.drops] == [("tests/test_rms_norm.py::test_dtensor", "needs more GPUs")]
    assert "Pending multi-GPU host support" in checked.drops[0].detail
    assert checked.command.endswith("tests/test_rms_norm.py --deselect tests/test_rms_norm.py::test_dtensor")
    assert checked.runs == 1 and checked.summary == "1 passed, 1 xfailed" and "2 deselected" in checked.within
    assert subprocess.run(checked.command, shell=True, cwd=tmp_path, capture_output=True).returncode == 0


def test_where_the_tests_interpreter_cannot_load_the_plugin_they_run_without_it(tmp_path):
    """A prefix that replaces PYTHONPATH hides init's plugin: the run is made again without it and the
    xfail is dropped after it ran, as before the plugin."""
    _write(tmp_path, {"tests/test_rms_norm.py": MULTI_HOST_XFAIL})
    checked = check_correctness(tmp_path, "PYTHONPATH=/nonexistent ", sys.executable, ["tests/test_rms_norm.py"], [],
                                timeout_s=300, gpus=1)
    assert len(list(tmp_path.glob("ran-[48]"))) == 2
    assert [(d.target, d.kind) for d in checked.drops] == [("tests/test_rms_norm.py::test_dtensor", "needs more GPUs")]
    assert checked.runs == 1 and "deselected" not in checked.within


def test_init_exits_saying_what_to_write_when_nothing_passes(tmp_path):
    _write(tmp_path, {k: v for k, v in PLANTED.items() if "legacy" in k or "cute" in k or k == "tests/__init__.py"})
    with pytest.raises(InitError, match=r"no test of the proposed correctness command passes.*--correctness CMD") as e:
        check_correctness(tmp_path, "", sys.executable, ["tests/legacy/test_rms_norm.py", "tests/cute/test_rms_norm.py"],
                          [], timeout_s=300)
    assert "off by half" in str(e.value) and "no_such_dsl_package_xyz is not installed" in str(e.value)


def test_pytest_selection_narrows_to_the_benchmarks_topic(tmp_path):
    _write(tmp_path, {
        "tests/test_norm_ops.py": "import pytest\n\n@pytest.mark.rms_norm\ndef test_rms():\n    pass\n\n"
                                  "@pytest.mark.layer_norm\ndef test_layer():\n    pass\n",
        "tests/test_ops.py": "def test_rms_norm_small():\n    pass\n\ndef test_gelu():\n    pass\n"})
    # FlagGems: the benchmark's own marker, where the tests carry it
    fg = "python -m pytest -s benchmark/test_norm_perf.py -m rms_norm --level core"
    assert selection(tmp_path, ["tests/test_norm_ops.py"], ["benchmark/test_norm_perf.py"], fg, None) == ["-m", "rms_norm"]
    # no file named after the topic, some test functions are: -k
    assert selection(tmp_path, ["tests/test_ops.py"], ["bench/benchmark_rms_norm.py"], "python x", None) == ["-k", "rms_norm"]
    assert selection(tmp_path, ["tests/test_ops.py"], ["bench/benchmark_gemm.py"], "python x", None) == []
    # flash-linear-attention: `python -m benchmarks.ops.run --op chunk_gla` names the op, not a file of its topic
    tests = ["tests/ops/test_gla.py", "tests/ops/test_simple_gla.py", "tests/ops/test_kda.py"]
    assert correctness_tests(tests, ["benchmarks/ops/run.py"], None, "python -m benchmarks.ops.run --op chunk_gla") == [
        "tests/ops/test_gla.py"]
    assert command_text("A=1 ", "python", ["t.py"], ["-k", "a b"], ["t.py::x[1 2]"]) == (
        "A=1 python -m pytest -q -x -p no:cacheprovider t.py -k 'a b' --deselect 't.py::x[1 2]'")


def test_a_run_cut_by_the_time_limit_leaves_out_the_test_it_was_inside_and_what_it_never_reached(tmp_path):
    _write(tmp_path, {
        "t/test_a.py": "def test_a():\n    pass\n",
        "t/test_b.py": "import time\n\ndef test_fast():\n    pass\n\n"
                       "def test_hang():\n    time.sleep(600)\n\ndef test_after():\n    pass\n",
        "t/test_c.py": "def test_c():\n    pass\n"})
    # 40 s: test_hang holds the run for more than half the limit (one test held it: the rest runs again) even
    # when pytest takes 15 s to start on a loaded machine
    checked = check_correctness(tmp_path, "", sys.executable, ["t/test_a.py", "t/test_b.py", "t/test_c.py"], [],
                                timeout_s=40)
    assert [(d.target, d.kind, d.detail.split(" within")[0]) for d in checked.drops] == [
        ("t/test_b.py::test_hang", "too slow", "did not finish"), ("t/test_c.py", "too slow", "not reached")]
    assert checked.command.endswith("t/test_a.py t/test_b.py --deselect t/test_b.py::test_hang")
    assert checked.summary.startswith("3 passed")  # test_after ran in the second run


def test_a_proposal_whose_tests_were_not_run_is_printed_loudly_and_never_written(tmp_path, capsys):
    from kopt_mcp.app.cli import main

    _write(tmp_path, {"bench.py": "open('out.csv', 'w').write('n,us\\n1,2.5\\n2,5.5\\n')\n",
                      "tests/test_kernel.py": "def test_ok():\n    pass\n"})
    args = ["init", "--repo", str(tmp_path), "--command", f"{sys.executable} bench.py"]
    assert main([*args, "--no-run-tests"]) == 0
    out = capsys.readouterr()
    assert "# NOT RUN: init did not run this command (--no-run-tests)" in out.out and "WARNING" in out.err
    assert main([*args, "--no-run-tests", "--write"]) == 2 and not (tmp_path / "kopt.toml").exists()
    assert "never run" in capsys.readouterr().err
    # your own correctness command is run once too: one that fails on the unmodified tree is refused
    assert main([*args, "--correctness", f"{sys.executable} -c 'raise SystemExit(3)'", "--write"]) == 2
    assert "exited 3 on the unmodified tree" in capsys.readouterr().err and not (tmp_path / "kopt.toml").exists()
    assert main([*args, "--correctness", f"{sys.executable} -m pytest -q tests", "--write"]) == 0
    assert "# init ran this command on the unmodified tree: 1 passed" in (tmp_path / "kopt.toml").read_text()


def test_tests_that_import_the_kernels_module_are_chosen_where_no_file_is_named_after_it():
    """Issue 35: the tests of a kernel are those that name its topic or import its module."""
    tests = ["tests/test_activations.py", "tests/test_norms.py", "tests/test_misc.py"]
    sources = {"tests/test_activations.py": "import torch\nfrom mylib.ops.swiglu import swiglu_fwd\n",
               "tests/test_norms.py": "from mylib.ops import rms_norm\n",
               "tests/test_misc.py": "import mylib\n# swiglu in a comment only\n"}
    bench = ["benchmark/benchmark_swiglu.py"]
    assert correctness_tests(tests, bench, None, "python benchmark/benchmark_swiglu.py", sources) == [
        "tests/test_activations.py"]
    assert correctness_tests(tests, ["benchmark/benchmark_rms_norm.py"], None, "", sources) == ["tests/test_norms.py"]
    assert correctness_tests(tests, bench, None, "", {}) == tests  # no source read: every test file, as before


def test_a_run_that_never_wrote_its_report_does_not_stand_for_the_narrowed_command(tmp_path):
    """pytest-timeout's thread method ends a hung test with os._exit: no JUnit report, the tests after it
    never ran. Such a run is not a whole session, so it cannot stand for the narrowed command."""
    _write(tmp_path, {"t/test_a.py": "def test_broken():\n    assert 0.5 == 1.0\n",
                      "t/test_b.py": "import os\n\ndef test_ok():\n    pass\n\ndef test_exit():\n    os._exit(1)\n\n"
                                     "def test_never_reached():\n    pass\n"})
    with pytest.raises(InitError, match=r"exited 1 on the unmodified tree without a failing test"):
        check_correctness(tmp_path, "", sys.executable, ["t/test_a.py", "t/test_b.py"], [], timeout_s=120)
