"""kopt-mcp: an MCP server that referees autonomous GPU-kernel optimization loops."""

__version__ = "0.1.0"
