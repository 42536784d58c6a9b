"""The benchmark interpreter's module names: the evidence of the shadowing rule (rules/shadowing.py).

The benchmark may run another Python than the server's (a project venv, `python3.12`, an entry
point such as `pytest` or `torchrun`), with other packages installed; so the names are asked of the
interpreter the benchmark command runs (`interpreter`), with the run's environment, once per
session (the referee keeps the answer): `sys.stdlib_module_names` (Python 3.10+) and the top-level
names of `importlib.metadata.packages_distributions()` (top_level.txt, else the installed files).
Where that interpreter cannot answer, this server's own names are used and `python` says so.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from importlib.metadata import packages_distributions
from pathlib import Path

from kopt_mcp.rules.shadowing import ModuleNames

QUERY = ("import json, sys\nfrom importlib.metadata import packages_distributions\n"
         "print(json.dumps({'stdlib': sorted(sys.stdlib_module_names), 'installed': sorted(packages_distributions()),"
         " 'python': f'{sys.executable} (Python {sys.version.split()[0]})'}))")
QUERY_TIMEOUT_S = 60.0
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?$")


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


def _shebang_python(path: str) -> str | None:
    """The interpreter on the `#!` line of the script at `path` when it is a Python, else None."""
    try:
        with open(path, "rb") as f:
            line = f.readline(300).decode("utf-8", errors="replace")
    except OSError:
        return None
    words = line[2:].split() if line.startswith("#!") else []
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    return words[0] if words and _PYTHON.match(Path(words[0]).name) else None


def interpreter(command: str, env: Mapping[str, str], cwd: Path) -> str:
    """The Python that the benchmark `command` runs in `cwd` with environment `env`: its first word
    named like a Python (`python`, `python3.11`, `.venv/bin/python`, after `uv run` or `env X=1`),
    else the Python on the `#!` line of its first command (an entry point: pytest, torchrun), else
    `python3` on the run's PATH. Returned as a path or a name to look up on that PATH."""
    path = env.get("PATH", os.environ.get("PATH", ""))
    words = [w for w in _words(command) if not re.match(r"^[A-Za-z_]\w*=", w)]
    for w in words:
        if _PYTHON.match(Path(w).name):
            return str(cwd / w) if "/" in w and not w.startswith("/") else w
    if words:
        first = words[0] if "/" in words[0] else shutil.which(words[0], path=path)
        found = _shebang_python(str(cwd / first) if first and not first.startswith("/") else first or "")
        if found:
            return found
    return "python3"


def _own() -> ModuleNames:
    return ModuleNames(stdlib=frozenset(sys.stdlib_module_names), installed=frozenset(packages_distributions()),
                       python=f"{sys.executable} (this server's own Python)")


def module_names(command: str, env: Mapping[str, str], cwd: Path) -> ModuleNames:
    """Ask the benchmark's interpreter (`interpreter`) for its stdlib and installed top-level module
    names, run in an empty temporary folder (so nothing of the repository is on its path) with
    os.environ + `env`. Falls back to this server's own names (said in `python`) when it cannot be
    started, fails (Python < 3.10), answers nonsense or takes longer than QUERY_TIMEOUT_S."""
    full = {**os.environ, **env}
    exe = interpreter(command, full, cwd)
    resolved = exe if "/" in exe else shutil.which(exe, path=full.get("PATH"))
    if not resolved:
        return _own()
    with tempfile.TemporaryDirectory(prefix="kopt-modules-") as tmp:
        try:
            r = subprocess.run([resolved, "-c", QUERY], cwd=tmp, env=full, capture_output=True, text=True,
                               timeout=QUERY_TIMEOUT_S, stdin=subprocess.DEVNULL)
            data = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else None
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
            data = None
    if not isinstance(data, dict) or not isinstance(data.get("stdlib"), list):
        return _own()
    return ModuleNames(stdlib=frozenset(data["stdlib"]), installed=frozenset(data.get("installed") or ()),
                       python=str(data.get("python") or resolved))
