"""The result files of one run: capture the matching files before it, then keep the fresh ones after
it with their content from before (a row left unchanged is stale: readers/stale.py)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from kopt_mcp.config import BenchmarkSection
from kopt_mcp.errors import MissingResults, StaleResults
from kopt_mcp.readers import ResultFile


def fresh_csvs(workdir: Path, pattern: str, started_at: float) -> list[Path]:
    """The files matching `pattern` under `workdir` written at or after `started_at` (epoch s).

    Raises MissingResults (a MetricsError) if none match, StaleResults if all that match are older
    than the run.
    """
    hits = sorted(Path(p) for p in glob.glob(str(workdir / pattern), recursive=True) if os.path.isfile(p))
    if not hits:
        raise MissingResults(
            f"the benchmark wrote no file matching {pattern!r} under {workdir}: "
            "check [benchmark] csv and that the benchmark writes its CSV there"
        )
    # Filesystem mtimes can be coarser than the clock; allow 10 ms of slack only.
    fresh = [p for p in hits if p.stat().st_mtime >= started_at - 0.01]
    if not fresh:
        raise StaleResults(
            f"stale metrics: {', '.join(p.name for p in hits)} predate this run; the benchmark "
            "must write its CSV on every run (a file left from an earlier run never counts)"
        )
    return fresh


def capture_before(cwd: Path, bench: BenchmarkSection, all_tracked: bool = False) -> dict[str, tuple[bytes, bool]]:
    """Before a run: path -> (bytes, tracked by git) of every file matching `[benchmark] csv` under
    `cwd` (empty for format stdout). Pass the result to `collect_results` after the run.

    `all_tracked=True` counts every file already there as tracked without asking git: for a fresh
    checkout of a snapshot (with or without a .git), where nothing was left by an earlier run."""
    if not bench.csv or bench.format == "stdout":
        return {}
    hits = [Path(p) for p in glob.glob(str(cwd / bench.csv), recursive=True) if os.path.isfile(p)]
    if not hits:
        return {}
    if all_tracked:
        return {str(h): (h.read_bytes(), True) for h in hits}
    tracked: set[str] = set()
    try:
        import git

        repo = git.Repo(cwd, search_parent_directories=True)
        root = Path(repo.working_tree_dir).resolve()
        listed = repo.git.ls_files("--", *[str(h.resolve().relative_to(root)) for h in hits])
        tracked = {str((root / line).resolve()) for line in listed.splitlines() if line}
    except Exception:  # no repository (or a path outside it): nothing counts as tracked
        tracked = set()
    return {str(h): (h.read_bytes(), str(h.resolve()) in tracked) for h in hits}


def collect_results(cwd: Path, bench: BenchmarkSection, started_at: float,
                    before: dict[str, tuple[bytes, bool]] | None = None,
                    log_path: Path | None = None) -> list[ResultFile]:
    """After a run: the fresh result files (`fresh_csvs`) with their content before the run, or, for
    format stdout, the run log at `log_path`. Raises MetricsError as `fresh_csvs` does, or when the
    stdout format has no log."""
    if not bench.csv or bench.format == "stdout":
        if log_path is None or not log_path.is_file():
            raise MissingResults("format = \"stdout\" reads the run log, and the run left none")
        return [ResultFile(path=str(log_path), after=log_path.read_bytes())]
    before = before or {}
    out = []
    for f in fresh_csvs(cwd, bench.csv, started_at):
        content, tracked = before.get(str(f), (None, False))
        out.append(ResultFile.load(f, content, tracked))
    return out
