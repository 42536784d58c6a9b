# `claude mcp add` lines for kopt-mcp. Run the one you need in the kernel repository (not this whole file).
# Options (--transport, --scope) go before the server name; --header is variadic, so it goes after the URL;
# `--` separates Claude Code's options from the server command.

# stdio: Claude Code starts the server itself, on this repository (default scope: local, only you, this project).
claude mcp add --transport stdio kopt -- kopt-mcp serve --repo "$PWD"

# streamable HTTP: a server started elsewhere with serve_http.sh (or on this machine behind an SSH tunnel).
# The shell expands $KOPT_MCP_TOKEN now and Claude Code stores the token in ~/.claude.json (local scope);
# for a project .mcp.json that is committed, use claude_code/.mcp.http.json instead (token stays a placeholder).
claude mcp add --transport http kopt-remote http://127.0.0.1:8765/mcp --header "Authorization: Bearer $KOPT_MCP_TOKEN"
