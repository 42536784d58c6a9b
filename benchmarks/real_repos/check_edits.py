#!/usr/bin/env python3
"""Apply every candidate (and compat edit) of a project in projects.py to the upstream file text read
from a git directory (`git --git-dir DIR show COMMIT:path`, e.g. a fetched mirror), each to its own
temporary copy, and check that every edited Python file still parses. Stores nothing from the project.

    python benchmarks/real_repos/check_edits.py --project triton-kernels \\
        --git-dir /work/.mirror/ai-compiler-study+triton-kernels/repo [--commit d068688] [--diff win-bwd]

Prints one line per candidate (`ok` or the error) and, with --diff NAME, that candidate's unified diff.
Exit status 0 when every edit applied and parsed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from projects import PROJECTS, EditError


def upstream_text(git_dir: str, commit: str, path: str) -> str:
    """The file at `commit:path` in `git_dir`. Raises subprocess.CalledProcessError if git cannot show it."""
    return subprocess.run(["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"], capture_output=True,
                          text=True, check=True).stdout


def check(project: str, git_dir: str, commit: str, diff: str | None = None) -> bool:
    """Apply each of `project`'s compat edits and candidates to a fresh temporary copy; True when all
    applied and parsed. Prints `name: ok` or `name: <error>` per edit."""
    proj = PROJECTS[project]
    good = True
    for cand in [*proj.compat, *proj.candidates]:
        with tempfile.TemporaryDirectory() as tmp:
            ws = Path(tmp)
            before = upstream_text(git_dir, commit, cand.file)
            (ws / cand.file).parent.mkdir(parents=True, exist_ok=True)
            (ws / cand.file).write_text(before)
            try:
                cand.apply(ws)
                after = (ws / cand.file).read_text()
                if cand.file.endswith(".py"):
                    ast.parse(after, filename=cand.file)
                if after == before:
                    raise EditError("the edit changed nothing")
            except (EditError, SyntaxError) as e:
                good = False
                print(f"{cand.name}: {type(e).__name__}: {e}")
                continue
            print(f"{cand.name}: ok ({cand.file}, {len(after.splitlines()) - len(before.splitlines()):+d} lines)")
            if diff == cand.name:
                sys.stdout.writelines(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                                           f"a/{cand.file}", f"b/{cand.file}"))
    return good


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", default="triton-kernels", choices=sorted(PROJECTS))
    ap.add_argument("--git-dir", required=True, help="the project's git directory (a mirror: no work tree needed)")
    ap.add_argument("--commit", default="HEAD")
    ap.add_argument("--diff", default=None, help="print this candidate's unified diff")
    a = ap.parse_args()
    return 0 if check(a.project, a.git_dir, a.commit, a.diff) else 1


if __name__ == "__main__":
    sys.exit(main())
