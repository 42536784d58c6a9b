"""Helpers shared by the benchmark drivers (one module, imported as `benchmarks.common` once the checkout
root is on sys.path): git in a throwaway repository under a fixed identity, JSON results written the same
way everywhere, and the GPUs nvidia-smi lists. Imports nothing of kopt_mcp or of other benchmarks, so any
driver may use it without an import circle."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

#: the checkout (or .devstage/) root: the folder holding benchmarks/
ROOT = Path(__file__).resolve().parents[1]
#: the identity of every commit a benchmark makes in its own repositories
GIT_ID = ("-c", "user.name=bench", "-c", "user.email=bench@localhost")


def git(cwd: Path | str, *args: str) -> str:
    """Run `git ARGS` in `cwd` under GIT_ID; its stdout (text). Raises subprocess.CalledProcessError
    (with stderr) when git exits non-zero."""
    return subprocess.run(["git", *GIT_ID, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def init_repo(path: Path, message: str) -> Path:
    """Make `path` (files already there) a git repository on branch main with everything committed as
    `message`; `path`. Raises subprocess.CalledProcessError when git fails."""
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", message)
    return path


def write_json(path: Path, obj: object) -> Path:
    """Write `obj` to `path` as JSON (indent 1, non-JSON values as str, a final newline), creating its
    folder; `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1, default=str) + "\n")
    return path


def gpu_uuids() -> dict[str, int]:
    """uuid -> index of every NVIDIA GPU nvidia-smi lists ({} without nvidia-smi: `--repo cpu`)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {u.strip(): int(i) for i, u in (line.split(",") for line in out.splitlines() if line.strip())}
