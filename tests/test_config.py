"""The target config (kopt.toml): strict validation, frozen, hashed."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pydantic
import pytest

from kopt_mcp.config import ConfigFile, load_config
from kopt_mcp.errors import ConfigError

FULL = """\
[benchmark]
command = "python bench.py --all"
workdir = "kernels"
csv = "results/*.csv"
metric = "tflops"
higher_is_better = true
correctness_columns = ["err_count", "err_max"]
correctness = "max_abs_err < 1e-3"
config_columns = ["M", "N", "dtype"]
timeout_s = 120

[correctness]
command = "pytest -q tests/test_kernel.py"
timeout_s = 90

[profiler]
backend = "ncu"
kernel = "softmax_.*"
timeout_s = 300

[gates]
noise_pct = 2.5
confirmations = 3
max_repairs = 2
max_consecutive_regressions = 4
gpu_wait_s = 60
gpu_poll_s = 5
idle_util_pct = 20
idle_mem_mib = 1024
gpu_probe = "nvidia-smi"

[protect]
paths = ["bench.py", "reference/"]

[format]
command = "ruff format kernel.py"
timeout_s = 30

[warmup]
command = "python bench.py --warmup"
timeout_s = 200
"""

MINIMAL = """\
[benchmark]
command = "python bench.py"
csv = "out.csv"
metric = "us"
correctness_columns = ["err"]
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "kopt.toml"
    p.write_text(text, encoding="utf-8")
    return p


def config_error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as ei:
        load_config(write(tmp_path, text))
    return str(ei.value)


def test_complete_config_loads_every_section(tmp_path):
    t = load_config(write(tmp_path, FULL)).target
    assert t.benchmark.command == "python bench.py --all"
    assert t.benchmark.workdir == "kernels"
    assert t.benchmark.higher_is_better is True
    assert t.benchmark.correctness_columns == ["err_count", "err_max"]
    assert t.benchmark.correctness == "max_abs_err < 1e-3"
    assert t.benchmark.config_columns == ["M", "N", "dtype"]
    assert t.benchmark.timeout_s == 120.0
    assert t.correctness.command == "pytest -q tests/test_kernel.py"
    assert t.correctness.timeout_s == 90.0
    assert (t.profiler.backend, t.profiler.kernel, t.profiler.timeout_s) == ("ncu", "softmax_.*", 300.0)
    g = t.gates
    assert (g.noise_pct, g.confirmations, g.max_repairs, g.max_consecutive_regressions) == (2.5, 3, 2, 4)
    assert (g.gpu_wait_s, g.gpu_poll_s, g.idle_util_pct, g.idle_mem_mib, g.gpu_probe) == (
        60.0, 5.0, 20.0, 1024.0, "nvidia-smi")
    assert t.protect.paths == ["bench.py", "reference/"]
    assert (t.format.command, t.format.timeout_s) == ("ruff format kernel.py", 30.0)
    assert (t.warmup.command, t.warmup.timeout_s) == ("python bench.py --warmup", 200.0)


def test_minimal_config_gets_design_defaults(tmp_path):
    t = load_config(write(tmp_path, MINIMAL)).target
    assert t.benchmark.workdir == "."
    assert t.benchmark.higher_is_better is False
    assert t.benchmark.timeout_s == 600.0
    g = t.gates
    assert (g.noise_pct, g.confirmations, g.max_repairs, g.max_consecutive_regressions) == (1.0, 2, 3, 5)
    assert (g.gpu_wait_s, g.gpu_poll_s) == (3600.0, 600.0)
    assert t.protect.paths == []
    assert t.profiler.backend == "auto"


def test_unknown_section_lists_valid_sections(tmp_path):
    msg = config_error(tmp_path, MINIMAL + "\n[gpus]\ncount = 2\n")
    assert "unknown section [gpus]" in msg
    for section in ("benchmark", "correctness", "profiler", "gates", "protect", "format", "warmup"):
        assert section in msg


def test_unknown_key_lists_valid_keys_of_its_section(tmp_path):
    msg = config_error(tmp_path, MINIMAL + "\n[gates]\nnoise_percent = 2\n")
    assert "unknown key [gates] noise_percent" in msg
    for key in ("noise_pct", "confirmations", "max_repairs", "max_consecutive_regressions", "gpu_wait_s"):
        assert key in msg


def test_unknown_key_in_benchmark_lists_benchmark_keys(tmp_path):
    msg = config_error(tmp_path, MINIMAL + 'metrics = "x"\n')
    assert "unknown key [benchmark] metrics" in msg
    for key in ("command", "workdir", "csv", "metric", "higher_is_better", "config_columns", "timeout_s"):
        assert key in msg


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ('\n[gates]\nnoise_pct = "lots"\n', "[gates] noise_pct"),
        ('\n[gates]\nconfirmations = 1.5\n', "[gates] confirmations"),
        ("\n[protect]\npaths = \"bench.py\"\n", "[protect] paths"),
        ('\n[profiler]\nbackend = "rocprof"\n', "[profiler] backend"),
        ("\n[gates]\nnoise_pct = -1\n", "[gates] noise_pct"),
        ("\n[gates]\nconfirmations = 0\n", "[gates] confirmations"),
    ],
)
def test_wrong_type_or_value_names_the_key(tmp_path, extra, where):
    assert where in config_error(tmp_path, MINIMAL + extra)


def test_wrong_type_in_benchmark_names_the_key(tmp_path):
    text = MINIMAL.replace('command = "python bench.py"', "command = 5")
    assert "[benchmark] command" in config_error(tmp_path, text)


@pytest.mark.parametrize("key", ["command", "csv", "metric"])
def test_missing_benchmark_key_is_named(tmp_path, key):
    text = "\n".join(line for line in MINIMAL.splitlines() if not line.startswith(f"{key} "))
    assert f"missing [benchmark] {key}" in config_error(tmp_path, text)


def test_missing_benchmark_section_is_named(tmp_path):
    assert "missing [benchmark]" in config_error(tmp_path, '[gates]\nnoise_pct = 1\n')


def test_no_correctness_rule_is_an_error(tmp_path):
    text = MINIMAL.replace('correctness_columns = ["err"]\n', "")
    msg = config_error(tmp_path, text)
    assert "no correctness rule" in msg
    assert "correctness_columns" in msg and "[correctness] command" in msg


@pytest.mark.parametrize(
    "rule",
    ['correctness = "err == 0"', None],
)
def test_each_correctness_rule_alone_is_enough(tmp_path, rule):
    text = MINIMAL.replace('correctness_columns = ["err"]\n', "")
    if rule is None:
        text += '\n[correctness]\ncommand = "pytest -q"\n'
    else:
        text += rule + "\n"
    load_config(write(tmp_path, text))


def test_malformed_toml_is_a_config_error(tmp_path):
    msg = config_error(tmp_path, '[benchmark\ncommand = "x"\n')
    assert "not valid TOML" in msg


def test_non_utf8_file_is_a_config_error(tmp_path):
    p = tmp_path / "kopt.toml"
    p.write_bytes(b'[benchmark]\ncommand = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(p)


def test_missing_file_says_how_to_fix(tmp_path):
    with pytest.raises(ConfigError, match="not found.*--config"):
        load_config(tmp_path / "nope.toml")


def test_hash_is_sha256_of_file_bytes_and_path_is_absolute(tmp_path):
    p = write(tmp_path, MINIMAL)
    cf = load_config(p)
    assert cf.sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
    assert Path(cf.path).is_absolute() and Path(cf.path) == p.resolve()


def test_unchanged_file_is_not_changed(tmp_path):
    cf = load_config(write(tmp_path, MINIMAL))
    assert cf.changed() is False


def test_edit_after_load_is_reported_but_not_applied(tmp_path):
    p = write(tmp_path, MINIMAL)
    cf = load_config(p)
    p.write_text(MINIMAL.replace('metric = "us"', 'metric = "ms"'), encoding="utf-8")
    assert cf.changed() is True
    assert cf.target.benchmark.metric == "us"


def test_deleted_file_counts_as_changed(tmp_path):
    p = write(tmp_path, MINIMAL)
    cf = load_config(p)
    p.unlink()
    assert cf.changed() is True


def test_config_file_is_frozen(tmp_path):
    cf = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(pydantic.ValidationError):
        cf.sha256 = "0" * 64


def test_target_sections_are_frozen(tmp_path):
    cf = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(pydantic.ValidationError):
        cf.target.benchmark.command = "echo fake"
    with pytest.raises(pydantic.ValidationError):
        cf.target.gates.noise_pct = 50.0
    with pytest.raises(pydantic.ValidationError):
        cf.target.benchmark = cf.target.benchmark


def test_config_file_roundtrips_through_json(tmp_path):
    cf = load_config(write(tmp_path, FULL))
    assert ConfigFile.model_validate_json(cf.model_dump_json()) == cf


# --- [benchmark] reader keys (kopt_mcp/readers) ------------------------------------------------------


def test_reader_keys_load(tmp_path):
    text = MINIMAL.replace('metric = "us"', 'metric = "speed"\nformat = "csv-long"\nmetric_name_column = "metric_name"\n'
                           'value_column = "y_value_50"\nrows = "kernel_provider == \'ours\'"\nunit_column = "metric_unit"')
    b = load_config(write(tmp_path, text)).target.benchmark
    assert (b.format, b.metric_name_column, b.value_column, b.rows, b.unit_column) == (
        "csv-long", "metric_name", "y_value_50", "kernel_provider == 'ours'", "metric_unit")


def test_unknown_format_lists_the_formats(tmp_path):
    msg = config_error(tmp_path, MINIMAL + 'format = "xlsx"\n')
    assert "[benchmark] format" in msg and "csv-long" in msg and "pytest-benchmark" in msg


def test_csv_long_without_its_columns_says_what_to_add(tmp_path):
    msg = config_error(tmp_path, MINIMAL + 'format = "csv-long"\n')
    assert "needs metric_name_column" in msg and "value_column" in msg and "Value error" not in msg


def test_stdout_format_needs_no_csv_glob(tmp_path):
    text = MINIMAL.replace('csv = "out.csv"\n', 'format = "stdout"\nstdout_pattern = "t=(?P<us>[0-9.]+)"\n')
    assert load_config(write(tmp_path, text)).target.benchmark.csv == ""


def test_bad_stdout_pattern_is_named(tmp_path):
    msg = config_error(tmp_path, MINIMAL.replace('csv = "out.csv"\n', 'format = "stdout"\nstdout_pattern = "(?P<us"\n'))
    assert "stdout_pattern is not a valid regex" in msg


def test_unknown_benchmark_key_still_lists_the_new_keys(tmp_path):
    msg = config_error(tmp_path, MINIMAL + 'row = "x == 1"\n')
    assert "unknown key [benchmark] row" in msg and "rows" in msg and "stdout_pattern" in msg
