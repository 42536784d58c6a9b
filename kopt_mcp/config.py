"""The target config (`kopt.toml`): the fixed benchmark, metric, correctness rule, gates.

Read once at server start, validated strictly (unknown keys and wrong types are errors that list
the valid keys), then frozen: the SHA-256 of the file bytes is recorded in the session state, and
edits during the session change nothing (the server reports them; see `ConfigFile.changed`).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kopt_mcp.errors import ConfigError
from kopt_mcp.rules.protect import touched_protected


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class BenchmarkSection(_Section):
    """`[benchmark]`: the one fixed command and how to read its metrics file."""

    command: str = Field(min_length=1, description="shell command run in `workdir`")
    workdir: str = "."
    csv: str = Field("", description="glob (relative to workdir) of the result file(s): CSV or JSON; "
                     "not used with format = \"stdout\"")
    metric: str = Field(min_length=1, description="metric column (csv-long: the metric name); lower is better by default")
    format: Literal["auto", "csv", "csv-long", "json", "pytest-benchmark", "stdout"] = Field(
        "auto", description="how results are read (kopt_mcp/readers); auto: by file suffix and columns")
    rows: str = Field("", description="pandas query selecting the rows that count (e.g. kernel_provider == 'ours')")
    metric_name_column: str = Field("", description="csv-long: the column naming each row's metric")
    value_column: str = Field("", description="csv-long: the column holding each row's value")
    unit_column: str = Field("", description="column naming each row's unit (default: found, e.g. metric_unit)")
    stdout_pattern: str = Field("", description="stdout: regex with named groups, one match per row "
                                "(default: the last whitespace or markdown table in the log)")
    higher_is_better: bool = False
    correctness_columns: list[str] = Field(default_factory=list, description="each must be 0 on every row")
    correctness: str = Field("", description="row-wise condition (pandas eval), true on every row")
    config_columns: list[str] = Field(default_factory=list, description="found from the CSV when empty")
    timeout_s: float = Field(600.0, gt=0)

    @model_validator(mode="after")
    def _reader_keys(self) -> BenchmarkSection:
        if self.format != "stdout" and not self.csv:
            raise ValueError("missing [benchmark] csv (a glob of the result files; required unless format = \"stdout\")")
        if self.format == "csv-long" and not (self.metric_name_column and self.value_column):
            raise ValueError("[benchmark] format = \"csv-long\" needs metric_name_column (the column naming the "
                             "metric, e.g. \"metric_name\") and value_column (e.g. \"y_value_50\")")
        if self.stdout_pattern:
            try:
                rx = re.compile(self.stdout_pattern)
            except re.error as e:
                raise ValueError(f"[benchmark] stdout_pattern is not a valid regex: {e}") from e
            if self.metric not in rx.groupindex:
                raise ValueError(f"[benchmark] stdout_pattern needs a named group for the metric: (?P<{self.metric}>...)")
        return self


class CorrectnessSection(_Section):
    """`[correctness]`: an optional separate test command (exit 0 = pass)."""

    command: str = ""
    timeout_s: float = Field(600.0, gt=0)


class ProfilerSection(_Section):
    """`[profiler]`: the keep-metric source and the target kernel."""

    backend: Literal["auto", "cupti", "ncu", "rocprofv3", "none"] = "auto"
    kernel: str = Field("", description="regex of the target kernel(s); default: the hottest kernel")
    timeout_s: float = Field(1200.0, gt=0)
    confirm: Literal["auto", "off"] = Field(
        "auto", description="commit_improvement confirms a keep with one out-of-process measurement (ncu as the "
        "benchmark's parent on NVIDIA, rocprofv3 on AMD: profilers/confirm.py); auto: where that tool is on PATH")
    confirm_flops: bool = Field(
        False, description="the ncu confirmation also counts the target's floating-point work per math path and "
        "refuses a rate beyond that path's peak, and reports % of the FLOP peak (profilers/ncu_flops.py); off by "
        "default: the counters take ncu from 1 replay pass to 3-8 and made an L2-resident kernel read 4% slower "
        "(both trees alike), so turn it on for compute-bound targets (GEMM, attention); its counter names were "
        "recorded on Hopper (H200): where ncu rejects one, the confirmation says so and comes back unavailable")


class GatesSection(_Section):
    """`[gates]`: thresholds of the rules (defaults are DESIGN.md's)."""

    noise_pct: float = Field(1.0, gt=0, description="changes smaller than this (%) are noise")
    confirmations: int = Field(2, ge=1, description="same-direction measurements a sub-noise win needs")
    confidence: float = Field(0.995, gt=0.5, lt=1.0,
                              description="one-sided confidence of the final paired test (rules/stats.py): the "
                              "profiler's per-launch GPU time where it records launches, else the script metric (a keep on it "
                              "is tested at 1 - (1 - confidence) / looks after each round that may keep: "
                              "rules.policy.Policy.keep_confidence)")
    screen_confidence: float = Field(0.95, gt=0.5, lt=1.0,
                                     description="one-sided confidence of the script metric's regression and divergence "
                                     "tests when a per-launch profiler test follows it (which then confirms wins)")
    min_gpu_gain_pct: float = Field(0.2, ge=0, description="least per-launch GPU-time gain (%) the keep metric "
                                    "accepts (its paired lower bound must exceed it; the floor rises with BEST's own "
                                    "spread in the attempt and its recent spreads: rules.floor.gpu_gain_floor)")
    max_rounds: int = Field(3, ge=1, description="most candidate runs per verdict (the repeat budget): paired script "
                            "rounds, less one for the profiled run where a per-launch profiler confirms")
    max_rounds_asked: int = Field(10, ge=1, description="most candidate runs per verdict an agent may ask for with "
                                  "save_and_test's `rounds` (a promising tie measured longer; the keep's test is split "
                                  "over the looks, so more rounds keep an identical candidate no more often)")
    baseline_runs: int = Field(3, ge=1, description="runs of unmodified BEST_COMMIT at the baseline (noise estimate)")
    max_repairs: int = Field(3, ge=0)
    max_consecutive_regressions: int = Field(5, ge=1)
    gpu_wait_s: float = Field(3600.0, ge=0)
    gpu_poll_s: float = Field(600.0, gt=0)
    idle_util_pct: float = Field(10.0, ge=0, le=100)
    idle_mem_mib: float = Field(2048.0, ge=0)
    idle_cpu_pct: float = Field(50.0, gt=0, le=100, description="without a GPU (the CPU is the device): a measuring "
                                "job waits while other processes use this % of all cores' time or more "
                                "(kopt_mcp/gpus/cpu.py); 100 turns the CPU gate off")
    cpu_wait_s: float = Field(60.0, ge=0, description="how long (s) the CPU gate waits for idle_cpu_pct; then it "
                              "measures anyway and says how busy the cores were")
    exclusive_cpu: bool = Field(False, description="without a GPU: a whole-machine gate for multi-threaded CPU "
                                "kernels that use every core: the gate waits, and a paired round counts as under load, "
                                "while other processes use a quarter of one core or more (rules/load.py)")
    gpu_probe: Literal["auto", "nvml", "nvidia-smi", "amdsmi", "amd-smi", "rocm-smi", "sysfs", "none"] = "auto"
    allow_script_only_keeps: bool | None = Field(
        None, description="may commit_improvement keep an `improved` that only the script metric decided (no "
        "profiler measured it; code script_only)? Unset: yes where no GPU profiler was expected (the CPU, or "
        "[profiler] backend = \"none\"), no where one was expected but none ran (rules/script_only.py)")


class ProtectSection(_Section):
    """`[protect]`: paths (files or directories, repo-relative) a candidate may not touch."""

    paths: list[str] = Field(default_factory=list)


class CommandSection(_Section):
    """`[format]` / `[warmup]`: one optional command."""

    command: str = ""
    timeout_s: float = Field(600.0, gt=0)


class CommitSection(_Section):
    """`[commit]`: what a keep's commit takes beyond the tested kernel tree and performance.md.

    `include`: tracked result files (repo-relative paths) that the benchmark rewrites on every run,
    e.g. a results table kept in the repository. Opt-in; empty by default, when a commit keeps
    BEST's version of every file a run rewrites. Each listed file is committed with a keep as the
    commit's re-measure wrote it in its run of the tested snapshot (never the workspace's copy,
    which the agent may have edited); a file that run did not rewrite keeps the snapshot's version.
    Protected paths, kopt.toml and performance.md cannot be listed."""

    include: list[str] = Field(default_factory=list, description="tracked result files the benchmark rewrites, "
                               "committed with a keep from the re-measure's run (repo-relative paths)")

    @model_validator(mode="after")
    def _plain_paths(self) -> CommitSection:
        for p in self.include:
            parts = PurePosixPath(p).parts
            if not p or p.startswith("/") or "\\" in p or ".." in parts or any(c in p for c in "*?["):
                raise ValueError(f"[commit] include: {p!r} is no repository-relative file path (no globs, no "
                                 "'..', no leading '/'): list each tracked result file, e.g. \"results/summary.csv\"")
            if p == "kopt.toml":
                raise ValueError("[commit] include: kopt.toml is the config; list only the benchmark's own result "
                                 "files")
        return self


class ClusterSection(_Section):
    """`[cluster]`: run every measuring job on a Ray cluster instead of this host (kopt_mcp/cluster;
    `pip install "kopt-mcp[ray]"`). Empty `ray_address`: measure here, as before.

    A measuring call's lease is a Ray actor holding one unit of `gpu_resource` on a node whose GPU
    passes the idle gate there ([gates] thresholds, gpu_probe); BEST's snapshot and the candidate's
    diff travel through Ray's object store; logs, result files and traces come back into the run
    folder. A node lost mid-job is retried once on another lease, then the call is `failed`.
    """

    ray_address: str = Field("", description="the Ray cluster to join (head's host:port, or \"auto\"); "
                             "empty: measure on this host")
    gpu_resource: str = Field("GPU", min_length=1, description="the Ray resource one lease holds (1 unit): \"GPU\" "
                              "(Ray binds the GPU), or a custom resource name (e.g. fake GPUs in tests)")
    start_timeout_s: float = Field(60.0, gt=0, description="how long (s) a lease's actor may take to start on a "
                                   "node; longer: every unit of gpu_resource there is held by other Ray jobs")
    namespace: str = Field("kopt-mcp", min_length=1, description="the Ray namespace of the lease actors")


class TargetConfig(_Section):
    """The whole `kopt.toml`."""

    benchmark: BenchmarkSection
    correctness: CorrectnessSection = CorrectnessSection()
    profiler: ProfilerSection = ProfilerSection()
    gates: GatesSection = GatesSection()
    protect: ProtectSection = ProtectSection()
    format: CommandSection = CommandSection()
    warmup: CommandSection = CommandSection()
    cluster: ClusterSection = ClusterSection()
    commit: CommitSection = CommitSection()

    @model_validator(mode="after")
    def _include_not_protected(self) -> TargetConfig:
        hits = touched_protected(list(self.commit.include), list(self.protect.paths))
        if hits:
            raise ValueError(f"[commit] include lists protected path(s) {', '.join(hits)}: a commit never takes a "
                             "run's copy of a protected file; remove them from include or from [protect] paths")
        return self

    @model_validator(mode="after")
    def _has_correctness_rule(self) -> TargetConfig:
        b = self.benchmark
        if not (b.correctness_columns or b.correctness or self.correctness.command):
            raise ValueError(
                "no correctness rule: set [benchmark] correctness_columns (each 0 on every row), "
                "[benchmark] correctness (a row-wise condition) or [correctness] command"
            )
        return self


def _valid_keys(model: type[BaseModel]) -> str:
    return ", ".join(model.model_fields)


def _explain(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = [str(p) for p in e["loc"]]
        section = loc[0] if loc else ""
        sub = TargetConfig.model_fields.get(section)
        where = f"[{section}] {'.'.join(loc[1:])}".strip() if len(loc) > 1 else f"[{section}]"
        if not loc or (len(loc) == 1 and e["type"] == "value_error"):  # a rule over the config or a section
            lines.append(str(e.get("ctx", {}).get("error", e["msg"])))
        elif e["type"] == "extra_forbidden":
            if sub is None:
                lines.append(f"unknown section [{section}]; valid sections: {_valid_keys(TargetConfig)}")
            else:
                lines.append(f"unknown key {where}; valid keys: {_valid_keys(sub.annotation)}")
        elif e["type"] == "missing":
            lines.append(f"missing {where}")
        else:
            lines.append(f"{where or 'config'}: {e['msg']} (got {e.get('input')!r})")
    return "; ".join(lines)


class ConfigFile(BaseModel):
    """A loaded, frozen config: where it came from, its SHA-256 and the parsed model."""

    model_config = ConfigDict(frozen=True)

    path: str
    sha256: str
    target: TargetConfig

    def changed(self) -> bool:
        """True if the file on disk no longer hashes to `sha256` (edits are reported, never applied)."""
        p = Path(self.path)
        return not p.exists() or hashlib.sha256(p.read_bytes()).hexdigest() != self.sha256


def load_config(path: Path) -> ConfigFile:
    """Read and validate `kopt.toml` at `path`.

    Raises ConfigError with what to fix: missing file, TOML syntax, unknown sections/keys (listing
    the valid ones), wrong types, missing required keys, no correctness rule.
    """
    if not path.is_file():
        raise ConfigError(
            f"config {path} not found: write a kopt.toml (see README 'Config') or pass --config PATH"
        )
    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"config {path} is not valid TOML: {e}") from e
    try:
        target = TargetConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"config {path}: {_explain(e)}") from e
    return ConfigFile(path=str(path.resolve()), sha256=hashlib.sha256(raw).hexdigest(), target=target)
