#!/bin/sh
# Start kopt-mcp as a streamable HTTP server (endpoint /mcp) for one kernel repository, with a bearer token.
# Run it on the GPU host. Settings (environment):
#   KOPT_MCP_TOKEN  the bearer token (required here; make one: python -c 'import secrets; print(secrets.token_urlsafe(32))')
#   KOPT_REPO       the kernel repository (default: the current directory)
#   KOPT_MCP_HOST   address to bind (default: 127.0.0.1; reach it from elsewhere through ssh -L 8765:127.0.0.1:8765)
#   KOPT_MCP_PORT   port (default: 8765)
: "${KOPT_MCP_TOKEN:?set KOPT_MCP_TOKEN to a long random token first}"
exec kopt-mcp serve --http --repo "${KOPT_REPO:-.}" --host "${KOPT_MCP_HOST:-127.0.0.1}" --port "${KOPT_MCP_PORT:-8765}"
