"""Where bundled files live: `resources/` and `examples/` from a source checkout, or their copies
inside the installed package (`kopt_mcp/_resources`, `kopt_mcp/_examples`)."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PKG / f"_{name}", _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bundled folder {name!r} not found next to {_PKG}: reinstall kopt-mcp")


def resources_dir() -> Path:
    """The folder holding program.md and the skill docs."""
    return _find("resources")


def examples_dir() -> Path:
    """The folder holding the bundled example kernel repositories."""
    return _find("examples")
