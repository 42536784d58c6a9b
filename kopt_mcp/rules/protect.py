"""Protected files (DESIGN.md): a candidate whose diff touches the benchmark, the oracle, the
config or the results log is rejected before it runs; so is a candidate that adds a symlink into a
protected path or out of the repository; and a run that rewrites one of them in its checkout is
rejected after it ran (`run_changes_verdict`). Pure: paths are repo-relative posix strings."""

from __future__ import annotations

import posixpath
from typing import Literal, NamedTuple

ALWAYS_PROTECTED = ("performance.md",)

#: most symlinks followed while resolving one path (Linux's own limit is 40)
MAX_LINK_HOPS = 40


def _guards(protected: list[str]) -> list[str]:
    return sorted({p.strip("/") for p in (*protected, *ALWAYS_PROTECTED) if p.strip("/")})


def _under(path: str, guard: str) -> bool:
    return path == guard or path.startswith(guard + "/")


def touched_protected(changed: list[str], protected: list[str]) -> list[str]:
    """The changed paths (repo-relative, posix) that equal or lie under a protected path.

    `protected` holds files or directories, repo-relative; ALWAYS_PROTECTED is added. Returns them
    sorted; empty means the candidate may run.
    """
    guards = _guards(protected)
    return sorted({p for p in changed if any(_under(posixpath.normpath(p), g) for g in guards)})


def resolve_link(link: str, links: dict[str, str]) -> str | None:
    """Where the symlink at repo path `link` points, as a repo-relative path ("" = the repository
    root), following the other symlinks of the tree (`links`: path -> target text, `link`
    included). None when it leaves the repository (an absolute target, `..` above the root, or more
    than MAX_LINK_HOPS hops)."""
    parts = link.split("/")[:-1]
    todo = links[link].split("/")
    if links[link].startswith("/"):
        return None
    hops = 0
    while todo:
        p = todo.pop(0)
        if p in ("", "."):
            continue
        if p == "..":
            if not parts:
                return None
            parts.pop()
            continue
        parts.append(p)
        here = "/".join(parts)
        if here in links:
            hops += 1
            target = links[here]
            if hops > MAX_LINK_HOPS or target.startswith("/"):
                return None
            parts.pop()
            todo = target.split("/") + todo
    return "/".join(parts)


def unsafe_symlinks(new_links: list[str], links: dict[str, str], protected: list[str]) -> list[str]:
    """Why each of `new_links` (symlinks the candidate adds or changes) may not run, one sentence per
    offending link; empty when none is unsafe. A link is unsafe when it points out of the repository
    (writes through it would land outside every checkout and every diff), or at a protected path, at
    a directory holding one (e.g. `lib -> .`), or at something under one. `links`: every symlink of
    the candidate's tree, path -> target text (used to follow chains)."""
    guards = _guards(protected)
    out = []
    for link in sorted(new_links):
        where = resolve_link(link, links)
        if where is None:
            out.append(f"{link} is a symlink to {links[link]}, outside the repository")
            continue
        hit = [g for g in guards if _under(where, g) or where == "" or g.startswith(where + "/")]
        if hit:
            shown = where or "the repository root"
            out.append(f"{link} is a symlink to {shown}, which is or holds protected {', '.join(hit)}")
    return out


ChangeKind = Literal["rewrote", "deleted", "added"]


class FileChange(NamedTuple):
    """One file of a run's checkout that differs from its snapshot after the run."""

    kind: ChangeKind
    path: str


def describe(changes: list[FileChange], who: str = "the run") -> str:
    """"the run rewrote a, b; the run deleted c" (grouped by kind, in order rewrote/deleted/added)."""
    parts = []
    for kind in ("rewrote", "deleted", "added"):
        paths = sorted(c.path for c in changes if c.kind == kind)
        if paths:
            parts.append(f"{who} {kind} {', '.join(paths)}")
    return "; ".join(parts)


def run_changes_verdict(changes: list[FileChange], protected: list[str], outputs: list[str] = (),
                        who: str = "the run") -> tuple[str | None, list[FileChange]]:
    """Judge what a run changed in its checkout: (reason to reject, other changes to report).

    A change to a protected path (the benchmark, oracle, config, performance.md) rejects, named
    ("the run rewrote bench.py"). Changes to `outputs` (tracked files the unchanged benchmark
    rewrites itself) are ignored unless protected. Everything else is returned to be reported."""
    hits = set(touched_protected([c.path for c in changes], protected))
    bad = [c for c in changes if c.path in hits]
    rest = [c for c in changes if c.path not in hits and c.path not in set(outputs)]
    if not bad:
        return None, rest
    return (describe(bad, who) + ": the benchmark, oracle, config and performance.md are fixed for the "
            "session and a run may not write them; make the change in the kernel only"), rest
