"""`kopt-mcp report`: find a session's store on disk and write its HTML report (kopt_mcp.views.report_html).

It never opens a Referee (that takes the one-server-per-repository lock, held by a running server):
it finds the session by its `state.json` under the repository's `.kopt/` folder or its git common
dir, so it works whichever of the two holds the store, while a server runs or after it ended.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from kopt_mcp.config import load_config
from kopt_mcp.views.report_html import REPORT_NAME, write_report

SKIP = {"runs", "attempts", "cache", "objects", "refs", "logs", "hooks", "info", "node_modules", "__pycache__"}
MAX_DEPTH = 5


class StoreView:
    """Read-only view of one session's store folder (`state.json`, `ledger.jsonl`, `attempts/`):
    the part of `kopt_mcp.ledger.Store` the report reads (`root`, `ledger()`, `find_patch(n)`)."""

    def __init__(self, root: Path):
        self.root = root
        self.attempts = root / "attempts"

    def ledger(self) -> list[dict]:
        """Every ledger event, oldest first; a half-written last line is skipped."""
        p = self.root / "ledger.jsonl"
        out = []
        for line in p.read_text(encoding="utf-8").splitlines() if p.exists() else []:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def find_patch(self, attempt: int) -> Path | None:
        """The archived patch of `attempt`, whatever its label, or None."""
        hits = sorted(self.attempts.glob(f"{attempt:04d}-*.patch"))
        return hits[-1] if hits else None


def _search_roots(repo: Path) -> list[Path]:
    roots = [repo / ".kopt"]
    try:
        import git

        roots.append(Path(git.Repo(repo, search_parent_directories=False).common_dir).resolve())
    except Exception:  # not a git repository: only .kopt/ is searched
        pass
    return [r for r in dict.fromkeys(roots) if r.is_dir()]


def find_sessions(repo: Path) -> list[tuple[Path, dict]]:
    """(store folder, its state.json) of every kopt-mcp session found under `repo`'s `.kopt/` and git
    common dir (up to 5 levels deep; run, attempt and cache folders are not entered), newest first."""
    found: dict[Path, dict] = {}
    for top in _search_roots(repo):
        base = len(top.parts)
        for d, dirs, files in os.walk(top):
            depth = len(Path(d).parts) - base
            dirs[:] = [] if depth >= MAX_DEPTH else [x for x in dirs if x not in SKIP]
            if "state.json" in files and "ledger.jsonl" in files:
                try:
                    state = json.loads((Path(d) / "state.json").read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                if isinstance(state, dict) and "tag" in state:
                    found[Path(d).resolve()] = state
    return sorted(found.items(), key=lambda kv: (Path(kv[0]) / "ledger.jsonl").stat().st_mtime, reverse=True)


def pick_session(repo: Path, tag: str | None, command: str, hint: str,
                 main_only: bool = False) -> tuple[Path, dict] | None:
    """(store folder, state.json) of session `tag` of `repo` (None: the most recently active;
    `main_only`: main slots only), or None after printing on stderr, as `kopt-mcp <command>`, which
    sessions exist and `hint`."""
    sessions = [s for s in find_sessions(repo)
                if not main_only or str(s[1].get("branch", "")).startswith("kernel-opt/")]
    match = [s for s in sessions if tag is None or s[1].get("tag") == tag]
    if match:
        return match[0]
    tags = ", ".join(sorted({str(s[1].get("tag")) for s in sessions})) or "none"
    print(f"kopt-mcp {command}: no kopt-mcp session{f' with tag {tag!r}' if tag else ''} under {repo} "
          f"(sessions found: {tags}); {hint}", file=sys.stderr)
    return None


def _settings(state: dict) -> dict:
    """metric, direction and noise threshold from the session's frozen config (defaults if unreadable)."""
    try:
        t = load_config(Path(state["config_path"])).target
        return {"metric": t.benchmark.metric, "higher_is_better": t.benchmark.higher_is_better,
                "noise_pct": t.gates.noise_pct}
    except Exception as e:  # the report still renders; the numbers carry no unit name then
        print(f"kopt-mcp report: warning: cannot read the config {state.get('config_path')} ({e}); "
              "metric name and noise band left out", file=sys.stderr)
        return {}


def report_command(repo: Path, tag: str | None, out: Path | None) -> int:
    """Write the report of session `tag` (default: the most recently active) of `repo` to `out`
    (default `<store>/report.html`); print its path. Exit code 0, or 2 with a message on stderr."""
    repo = repo.resolve()
    if not repo.exists():
        print(f"kopt-mcp report: {repo} does not exist: pass the kernel repository with --repo", file=sys.stderr)
        return 2
    found = pick_session(repo, tag, "report", f"start one with `kopt-mcp serve --repo {repo}`")
    if found is None:
        return 2
    root, state = found
    workspace = Path(state.get("workspace", ""))
    path = write_report(StoreView(root), **_settings(state), performance_md=workspace / "performance.md",
                        out=out or root / REPORT_NAME, strict=True)
    print(path)
    return 0
