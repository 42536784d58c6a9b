"""Shadowing (issue 26): a candidate may not add a file that Python would import in place of a module
the benchmark's interpreter already has, nor a start-up hook. Python searches `sys.path` in order
and the benchmark's own folder comes first, so a new `csv.py` at the repository root is what
`import csv` loads (Python's "module search path": docs.python.org/3/tutorial/modules.html); and
`site` imports `sitecustomize` / `usercustomize` and runs the import lines of `*.pth` files at
start-up (docs.python.org/3/library/site.html). Either runs the candidate's code around the
benchmark's timing, so the candidate is `rejected` before it runs (code `shadowing`).

A file counts as a top-level module when its folder is not a package of the repository (no
`__init__.py` there) or is one of the benchmark's `sys.path` roots (its workdir, its scripts'
folders): `src/liger_kernel/csv.py` is `liger_kernel.csv` and shadows nothing. Modules the
repository itself provides at BEST (its own packages, even installed in editable mode) are never
shadowing. Pure: paths are repo-relative posix strings; the module names come from the benchmark's
interpreter (kopt_mcp/bench/modules.py)."""

from __future__ import annotations

import posixpath
from typing import NamedTuple

from kopt_mcp.rules.decision import Code, Decision
from kopt_mcp.rules.protect import FileChange

#: what `import name` finds in a folder besides a package: source, bytecode, extension modules
MODULE_SUFFIXES = (".py", ".pyw", ".pyc", ".so", ".pyd")
STARTUP_HOOKS = ("sitecustomize", "usercustomize")


class ModuleNames(NamedTuple):
    """The benchmark interpreter's module names: `stdlib` (sys.stdlib_module_names), `installed`
    (top-level import names of its installed distributions, importlib.metadata's
    packages_distributions) and `python` (which interpreter answered, for the reason)."""

    stdlib: frozenset[str]
    installed: frozenset[str]
    python: str = ""


class Shadow(NamedTuple):
    """One offending file: its repo path, the module name it takes, and what it shadows or is."""

    path: str
    module: str
    what: str


def module_of(path: str, packages: set[str], roots: set[str] = frozenset()) -> str | None:
    """The top-level module name the file at repo path `path` would be imported as, or None (not a
    module file, not an identifier, or only importable inside a package: its folder is in
    `packages`, the folders holding `__init__.py`, and not in `roots`). `pkg/__init__.py` is `pkg`;
    `csv.cpython-311-x86_64-linux-gnu.so` is `csv`."""
    folder, name = posixpath.split(path)
    if name == "__init__.py":
        folder, stem = posixpath.split(folder)
    elif name.endswith(MODULE_SUFFIXES):
        stem = name.split(".", 1)[0]
    else:
        return None
    if folder in packages and folder not in roots:
        return None
    return stem if stem.isidentifier() else None


def own_modules(files: list[str], packages: set[str], roots: set[str] = frozenset()) -> set[str]:
    """The top-level module names the repository's own tree provides (`files`: every path of BEST's
    tree; `packages`: its folders holding `__init__.py`)."""
    return {m for f in files if (m := module_of(f, packages, roots))}


def shadowing_files(changes: list[FileChange], names: ModuleNames, packages: set[str],
                    roots: set[str] = frozenset(), own: set[str] = frozenset()) -> list[Shadow]:
    """The files of a candidate's diff (`changes` against BEST) that may not run, in path order:
    any added or rewritten `*.pth`, `sitecustomize.*` or `usercustomize.*` module anywhere, and any
    ADDED file whose top-level module name (`module_of` with the candidate tree's `packages` and
    the benchmark's `roots`) is in `names` but not in `own` (the repository's own modules at BEST)."""
    out = []
    for c in sorted(changes, key=lambda c: c.path):
        if c.kind == "deleted":
            continue
        base = posixpath.basename(c.path)
        stem = base.split(".", 1)[0]
        if base.endswith(".pth"):
            out.append(Shadow(c.path, stem, "a .pth file (site runs its import lines at start-up)"))
        elif stem in STARTUP_HOOKS and base.endswith(MODULE_SUFFIXES):
            out.append(Shadow(c.path, stem, f"a start-up hook (site imports {stem} before the benchmark runs)"))
        elif c.kind == "added" and (m := module_of(c.path, packages, roots)) and m not in own:
            if m in names.stdlib:
                out.append(Shadow(c.path, m, f"the stdlib module {m}"))
            elif m in names.installed:
                out.append(Shadow(c.path, m, f"the installed package {m}"))
    return out


def shadowing_decision(shadows: list[Shadow], python: str = "") -> Decision | None:
    """`rejected` with code `shadowing`, naming every file and what it shadows; None when there is
    none. `python`: the interpreter whose module names were used (named in the reason)."""
    if not shadows:
        return None
    named = "; ".join(f"{s.path} would be imported as {s.what}" if not s.what.startswith("a ") else
                      f"{s.path} is {s.what}" for s in shadows)
    src = f" of {python}" if python else ""
    return Decision(outcome="rejected", code=Code.SHADOWING, numbers={"files": len(shadows)}, reason=(
        f"{named}: a new file may not take the name of a module the benchmark's interpreter{src} has, nor be "
        "a start-up hook (sitecustomize, usercustomize, *.pth), because it would run the candidate's code "
        "around the benchmark's own. Rename it (e.g. fast_csv.py) or move it into a package of the "
        "repository"))
