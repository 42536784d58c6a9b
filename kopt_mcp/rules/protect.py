"""Protected files (DESIGN.md): a candidate whose diff touches the benchmark, the oracle, the
config or the results log is rejected before it runs."""

from __future__ import annotations

from pathlib import PurePosixPath

ALWAYS_PROTECTED = ("performance.md",)


def touched_protected(changed: list[str], protected: list[str]) -> list[str]:
    """The changed paths (repo-relative, posix) that equal or lie under a protected path.

    `protected` holds files or directories, repo-relative; ALWAYS_PROTECTED is added. Returns them
    sorted; empty means the candidate may run.
    """
    guards = [PurePosixPath(p.strip("/")) for p in (*protected, *ALWAYS_PROTECTED) if p.strip("/")]
    hits = set()
    for path in changed:
        pp = PurePosixPath(path)
        if any(pp == g or g in pp.parents for g in guards):
            hits.add(path)
    return sorted(hits)
