"""`kopt-mcp init` counts the repository's own provider and the kernel its command benchmarks
(kopt_mcp/commands/init/own.py), on the real result files of Liger-Kernel (long CSV, providers
`liger` and `huggingface`), triton-kernels (a perf_report column per provider) and FlagGems (a
printed latency column per provider). On the H100 (issue 25) init counted Liger's `huggingface`
rows, the torch reference."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from kopt_mcp.commands.init.own import Ownership, branch_calls, choose, is_reference, ownership, provider_label
from kopt_mcp.commands.init.propose import Run, analyse, propose

FIX = Path(__file__).parents[1] / "fixtures" / "readers"
LIGER_CSV = (FIX / "liger_all_benchmark_data_head.csv").read_bytes()


def _package(root: Path, name: str) -> None:
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")


def test_liger_rows_count_liger_not_the_huggingface_reference(tmp_path):
    _package(tmp_path / "src", "liger_kernel")
    own = ownership(tmp_path, [], "python benchmark/scripts/benchmark_cross_entropy.py --overwrite")
    assert own.names[0] == "liger_kernel"
    keys, findings = analyse([Run(files={"data.csv": (None, LIGER_CSV)})], metric_name="speed", own=own)
    assert keys["rows"] == "kernel_provider == 'liger'"
    assert keys["comparisons"] == ["kernel_provider == 'huggingface'"]
    assert any("counting 'liger': its name matches the repository's liger_kernel" in f and
               "'huggingface' is a reference" in f for f in findings)


def test_a_reference_is_not_counted_even_where_nothing_names_the_repository(tmp_path):
    """Before issue 25 the first value in sorted order counted: 'huggingface' < 'liger'."""
    keys, findings = analyse([Run(files={"data.csv": (None, LIGER_CSV)})], metric_name="speed")
    assert keys["rows"] == "kernel_provider == 'liger'"
    assert any("the only value that is not a known reference" in f for f in findings)


def test_the_branch_that_calls_the_repositorys_code_is_its_provider():
    source = '''
from mypkg.ops import fast_norm
from mypkg import layers as L
import other

def setup(provider):
    if provider == "alpha":
        fn = other.norm
    elif provider == "beta":
        fn = fast_norm
    elif provider in ("gamma", "delta"):
        fn = L.Norm()
    return fn

PROVIDERS = {"eps": other.norm, "zeta": fast_norm}
'''
    assert branch_calls(source, {"mypkg"}) == {"beta": ["fast_norm"], "gamma": ["L"], "delta": ["L"],
                                               "zeta": ["fast_norm"]}
    assert branch_calls("def broken(:", {"mypkg"}) == {}
    own = Ownership(names=["somethingelse"], branches=branch_calls(source, {"mypkg"}))
    c = choose(["alpha", "beta"], own)
    assert (c.value, c.others) == ("beta", ["alpha"]) and "calls fast_norm" in c.why


def test_triton_kernels_counts_triton_where_every_branch_calls_its_package(tmp_path):
    """triton-kernels' benchmark calls rms_norm, rms_norm_torch_compile and rms_norm_torch, all from
    its own package: the references are still references."""
    own = Ownership(names=["triton_kernels"], branches={"triton": ["rms_norm"], "torch": ["rms_norm_torch"],
                                                        "torch_compile": ["rms_norm_torch_compile"]})
    cols = ["torch (GB/s)", "torch_compile (GB/s)", "triton (GB/s)"]
    c = choose(cols, own, labels={h: provider_label(h) for h in cols})
    assert c.value == "triton (GB/s)" and c.others == ["torch (GB/s)", "torch_compile (GB/s)"]
    # the real perf_report file, read whole: the metric column is triton's, the others are comparisons
    (tmp_path / "triton_kernels").mkdir()
    (tmp_path / "triton_kernels" / "__init__.py").write_text("")
    keys, findings = analyse([Run(files={"r.csv": (None, (FIX / "triton_perf_report_rms_norm.csv").read_bytes())})],
                             own=ownership(tmp_path, [], ""))
    assert keys["metric"] == "triton (GB/s)" and keys["higher_is_better"] is True
    assert keys["comparisons"] == ["column 'torch_compile (GB/s)'", "column 'torch (GB/s)'"]


@pytest.mark.parametrize("value, ref", [("torch", True), ("Torch Latency (ms)", True), ("torch_compile (GB/s)", True),
                                        ("huggingface", True), ("HF", True), ("liger", False), ("Gems Latency (ms)", False),
                                        ("triton (GB/s)", False), ("ours", False)])
def test_reference_names(value, ref):
    assert is_reference(value) is ref


def test_flaggems_gems_column_by_the_package_name(tmp_path):
    shutil.copy(FIX / "flaggems_rms_norm_perf.log", tmp_path / "perf.log")
    _package(tmp_path / "src", "flag_gems")
    p = propose(tmp_path, "cat perf.log", profile=False)
    assert 'metric = "Gems Latency (ms)"' in p.toml
    assert "its name matches the repository's flag_gems" in p.toml


def _long(rows: list[tuple[str, str, int, float]]) -> bytes:
    head = "kernel_name,kernel_provider,metric_name,metric_unit,x_value,y_value_50,timestamp\n"
    return (head + "".join(f"{k},{p},speed,ms,{x},{v},2026-11-2{i % 9}\n" for i, (k, p, x, v) in enumerate(rows))).encode()


def test_the_kernel_the_command_benchmarks_counts_and_other_kernels_rows_are_filtered_out():
    before = _long([("layer_norm", "mine", 1, 2.0), ("rms_norm", "mine", 1, 1.0)])
    after = _long([("layer_norm", "mine", 1, 2.0), ("rms_norm", "mine", 1, 1.1)])
    # the run rewrote the rms_norm rows only: the file's layer_norm rows never count
    keys, findings = analyse([Run(files={"d.csv": (before, after)})])
    assert keys["rows"] == "kernel_name == 'rms_norm'"
    assert any("counting 'rms_norm': the only one the run wrote" in f for f in findings)
    # a run that writes both kernels: the one the benchmark command names
    both = _long([("layer_norm", "mine", 1, 2.0), ("rms_norm", "mine", 1, 1.0)])
    own = Ownership(command="python benchmark/benchmark_rms_norm.py --overwrite benchmark_rms_norm")
    keys, findings = analyse([Run(files={"d.csv": (None, both)})], own=own)
    assert keys["rows"] == "kernel_name == 'rms_norm'"
    assert any("the benchmark command names it" in f for f in findings)


def test_a_benchmark_that_cannot_import_the_repositorys_package_is_told_to_put_src_first(tmp_path):
    from kopt_mcp.commands.init.propose import InitError, installed_copy_hint

    _package(tmp_path / "src", "tinynorm")
    (tmp_path / "bench.py").write_text("import tinynorm\n")
    with pytest.raises(InitError, match=r"could not import this repository's src/tinynorm.*PYTHONPATH=src"):
        propose(tmp_path, f"{sys.executable} bench.py", profile=False)
    assert installed_copy_hint(tmp_path, "ModuleNotFoundError: No module named 'numpy'") == ""


def test_statistics_of_one_measurement_are_not_providers():
    """flash-linear-attention's runner writes median_ms, p20_ms and p80_ms per shape: one provider."""
    csv = b"T,median_ms,p20_ms,p80_ms\n1024,1.5,1.4,1.6\n2048,2.5,2.4,2.6\n"
    keys, findings = analyse([Run(files={"r.csv": (None, csv)})])
    assert keys["metric"] == "median_ms" and keys["comparisons"] == []
    assert any("the median of one measurement's statistics" in f for f in findings)
