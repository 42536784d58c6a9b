"""The CLI (help text for every option, a missing --repo) and what publishing needs: the MCP Registry
entry (server.json) agrees with the package metadata, the README carries the registry's PyPI ownership
marker, and the entry's arguments exist on `kopt-mcp serve`."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

from kopt_mcp import __version__
from kopt_mcp.app.cli import _parser

ROOT = Path(__file__).resolve().parents[2]


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_server_json_matches_the_package():
    entry = json.loads((ROOT / "server.json").read_text())
    project = _project()
    assert entry["$schema"].startswith("https://static.modelcontextprotocol.io/schemas/")
    assert re.fullmatch(r"[a-zA-Z0-9.-]+/[a-zA-Z0-9._-]+", entry["name"])  # the schema's name pattern
    assert 1 <= len(entry["description"]) <= 100  # the schema's bound
    assert entry["version"] == project["version"] == __version__
    (pkg,) = entry["packages"]
    assert pkg["registryType"] == "pypi" and pkg["identifier"] == project["name"] and pkg["version"] == __version__
    assert pkg["transport"] == {"type": "stdio"} and pkg["version"] != "latest"
    # the official registry verifies PyPI ownership through this marker in the package's README
    assert f"mcp-name: {entry['name']}" in (ROOT / project["readme"]).read_text()


def test_server_json_arguments_exist_on_serve():
    pkg = json.loads((ROOT / "server.json").read_text())["packages"][0]
    args = pkg["packageArguments"]
    assert args[0] == {"type": "positional", "value": "serve"}
    serve = _parser()._subparsers._group_actions[0].choices["serve"]  # noqa: SLF001 - argparse has no public map
    flags = {s for a in serve._actions for s in a.option_strings}  # noqa: SLF001
    assert {a["name"] for a in args if a["type"] == "named"} <= flags


def test_package_metadata_for_the_index():
    project = _project()
    assert any(c.startswith("License :: OSI Approved") for c in project["classifiers"])
    assert "Programming Language :: Python :: 3.11" in project["classifiers"]
    assert project["urls"]["Repository"].startswith("https://github.com/")
    assert project["scripts"]["kopt-mcp"] == "kopt_mcp.app.cli:main"


def test_every_cli_option_has_help_text():
    parser = _parser()
    subs = parser._subparsers._group_actions[0].choices  # noqa: SLF001
    for name, sub in subs.items():
        for action in sub._actions:  # noqa: SLF001
            assert action.help, (name, action.option_strings or action.dest)


def test_a_missing_repo_is_reported_as_missing(tmp_path, capsys):
    from kopt_mcp.app.cli import main, open_session

    assert main(["check-config", "--repo", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    err = open_session(tmp_path / "nope", None, "t")
    assert "does not exist" in str(err) and "not a git repository" not in str(err)
