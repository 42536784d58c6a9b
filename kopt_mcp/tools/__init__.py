"""MCP tool adapters: one module per tool group; each validates, calls the referee, maps errors."""

from mcp.server.mcpserver import MCPServer

from kopt_mcp.tools import charts, gpu, info, knowledge, loop, measure


def register_all(mcp: MCPServer) -> None:
    """Register every tool on `mcp`."""
    for module in (info, gpu, measure, loop, charts, knowledge):
        module.register(mcp)
