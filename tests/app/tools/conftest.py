"""Fixtures of the MCP-layer tests: the anyio backend and an in-memory server on the toy repository."""

from __future__ import annotations

import pytest

from kopt_mcp.app.server import build_server


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def server(toy_repo, make_referee):
    """build_server over a fresh session on the toy repository (no baseline yet)."""
    return build_server(make_referee(toy_repo))
