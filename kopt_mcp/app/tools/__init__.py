"""MCP tool adapters: one module per tool group; each validates, calls the referee, maps errors."""

from __future__ import annotations

from mcp.server.mcpserver.tools import Tool

from kopt_mcp.app.tools import charts, gpu, info, knowledge, loop, measure

MODULES = (info, gpu, measure, loop, charts, knowledge)


def all_tools() -> list[Tool]:
    """Every kopt-mcp tool, as SDK Tool objects (pass them to MCPServer(tools=...))."""
    tools: list[Tool] = []
    for module in MODULES:
        module.register(tools)
    return tools


def select_tools(names: list[str] | None = None, read_only: bool = False) -> list[Tool]:
    """The tools to expose: only `names` (None: all), and with `read_only` only the read-only ones.
    Raises ValueError naming the unknown tools and the known ones."""
    tools = all_tools()
    known = [t.name for t in tools]
    if names is not None:
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise ValueError(f"unknown tool(s) {', '.join(unknown)}; known: {', '.join(known)}")
        tools = [t for t in tools if t.name in names]
    if read_only:
        tools = [t for t in tools if t.annotations is not None and t.annotations.read_only_hint]
    return tools
