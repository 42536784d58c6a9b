"""`kopt-mcp check-config`: validate kopt.toml against the repository and say what was found."""

from __future__ import annotations

import glob
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kopt_mcp.config import ConfigError, load_config
from kopt_mcp.gpus import make_probe
from kopt_mcp.metrics import MetricsError, read_metrics
from kopt_mcp.profilers import make_profiler


def check_config(repo: Path, config: Path | None) -> int:
    """Print the config's findings (rich, to stdout); 0 when usable, 2 with the error otherwise."""
    out = Console(soft_wrap=True)
    path = config or repo / "kopt.toml"
    try:
        cf = load_config(path)
    except ConfigError as e:
        out.print(f"[red]config error[/red]: {escape(str(e))}")
        return 2
    b = cf.target.benchmark
    out.print(f"config {cf.path} (sha256 {cf.sha256[:12]})")
    out.print(f"benchmark: `{b.command}` in {b.workdir}, timeout {b.timeout_s:g} s")
    out.print(f"metric: {b.metric} ({'higher' if b.higher_is_better else 'lower'} is better)")
    out.print(f"correctness: columns {b.correctness_columns or '-'}; condition {b.correctness or '-'}; "
              f"command {cf.target.correctness.command or '-'}")
    files = sorted(Path(p) for p in glob.glob(str(repo / b.workdir / b.csv), recursive=True))
    status = 0
    if files:
        try:
            t = read_metrics(files, b)
            out.print(f"existing CSV {', '.join(f.name for f in files)}: config columns {t.config_columns}; "
                      f"{len(t.classes)} config class(es): {', '.join(c.key for c in t.classes)}")
        except MetricsError as e:
            out.print(f"[red]existing CSV does not fit the config[/red]: {escape(str(e))}")
            status = 2
    else:
        out.print(f"no CSV matching {b.csv!r} yet: config classes are found from the first run")
    try:
        probe = make_probe(cf.target.gates.gpu_probe)
        gpus = probe.read()
        vendor = gpus[0].vendor if gpus else "cpu"
        out.print(f"GPU probe: {probe.name}; {len(gpus)} GPU(s)" + (": the CPU is the device" if not gpus else ""))
        prof = make_profiler(cf.target.profiler.backend, vendor)
        out.print(f"profiler: {prof.name}" + (f", target kernel regex {cf.target.profiler.kernel!r}"
                                             if cf.target.profiler.kernel else ", target: the hottest kernel"))
    except Exception as e:  # probe/profiler problems are findings, not crashes
        out.print(f"[red]device check failed[/red]: {escape(str(e))}")
        status = 2
    out.print(escape(f"protected: {cf.target.protect.paths + ['kopt.toml', 'performance.md']}"))
    return status
