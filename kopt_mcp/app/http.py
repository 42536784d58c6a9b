"""Streamable HTTP for `kopt-mcp serve --http`: bearer-token auth, the loopback rule, uvicorn on stderr.

The MCP endpoint is `/mcp`. Authentication uses the SDK's own bearer stack (`BearerAuthBackend` with a
`TokenVerifier`, then `RequireAuthMiddleware`), placed around the whole app that
`MCPServer.streamable_http_app()` returns, so a request without the right token gets HTTP 401 before it
reaches the session manager: no MCP session is created, no tool runs. The SDK's built-in route (the
`auth=AuthSettings(...)` + `token_verifier=` constructor options) is not used: `AuthSettings` requires
the URL of an OAuth authorization server, and there is none here (a static shared token), and
`build_server` owns the constructor.

OAuth discovery (`/.well-known/*`) and dynamic client registration (`/register`) answer 404 before
any auth check, token or not: there is no authorization server here, and a 401 on those paths makes
clients such as Claude Code report a misleading "Dynamic Client Registration rejected" instead of
falling back to the configured bearer header.

Token policy: from `--token-file` (first line) or the environment variable named by `--token-env`.
Without a token the server starts only on a loopback host (with a warning); elsewhere it refuses.
"""

from __future__ import annotations

import copy
import hmac
import ipaddress
import os
import stat
import sys
from pathlib import Path

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from kopt_mcp.errors import TokenError

DEFAULT_TOKEN_ENV = "KOPT_MCP_TOKEN"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MCP_PATH = "/mcp"
CLIENT_ID = "kopt-mcp-bearer"  # the one principal every holder of the shared token is
MIN_TOKEN_CHARS = 16
HOW_TO_SET = (f'set one: export {DEFAULT_TOKEN_ENV}="$(python -c \'import secrets; print(secrets.token_urlsafe(32))\')" '
              "(or --token-env NAME / --token-file PATH)")


def is_loopback(host: str) -> bool:
    """True for `localhost`, 127.0.0.0/8 and ::1 (also written [::1]); any other name or address is not."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _check_token_text(token: str, where: str) -> str:
    if not token:
        raise TokenError(f"{where} is empty; {HOW_TO_SET}")
    if not all(33 <= ord(c) <= 126 for c in token):
        raise TokenError(f"{where}: the token must be printable ASCII without spaces (it is sent in an HTTP header)")
    return token


def read_token_file(path: Path) -> str:
    """The first line of `path`, stripped. Refuses a file that group or others may read or write."""
    try:
        st = path.stat()
        first = path.read_text(encoding="utf-8").splitlines()[:1]
    except (OSError, UnicodeDecodeError) as e:
        raise TokenError(f"cannot read token file {path}: {e}") from e
    if os.name != "nt" and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(f"token file {path} is accessible by group/others (mode {stat.filemode(st.st_mode)}): "
                         f"run chmod 600 {path}")
    return _check_token_text(first[0].strip() if first else "", f"token file {path}")


def resolve_token(token_env: str = DEFAULT_TOKEN_ENV, token_file: Path | None = None) -> str | None:
    """The bearer token: `token_file` when given, else the environment variable `token_env`; None if unset."""
    if token_file is not None:
        return read_token_file(token_file)
    value = os.environ.get(token_env, "").strip()
    return _check_token_text(value, f"${token_env}") if value else None


def check_policy(host: str, token: str | None) -> list[str]:
    """Warnings to print before serving; raises TokenError where the server must not start at all."""
    if token is None:
        if not is_loopback(host):
            raise TokenError(f"refusing to serve on non-loopback host {host!r} without a bearer token; {HOW_TO_SET}")
        return [f"no bearer token set: any local user or process can call the tools on {host} ({HOW_TO_SET})"]
    warnings = []
    if len(token) < MIN_TOKEN_CHARS:
        warnings.append(f"the bearer token is short ({len(token)} characters); use {MIN_TOKEN_CHARS} or more")
    if not is_loopback(host):
        warnings.append("plain HTTP: the token crosses the network in clear text; use an SSH tunnel "
                        "(serve on 127.0.0.1, ssh -L) or a TLS proxy on networks you do not trust")
    return warnings


class StaticTokenVerifier(TokenVerifier):
    """Accepts exactly one shared token, compared in constant time."""

    def __init__(self, token: str) -> None:
        self._token = token.encode("utf-8")

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode("utf-8"), self._token):
            return AccessToken(token=token, client_id=CLIENT_ID, scopes=[])
        return None


def require_bearer(app: ASGIApp, token: str) -> ASGIApp:
    """`app` behind the SDK's bearer stack: HTTP requests without the token get 401; lifespan passes."""
    guarded = AuthenticationMiddleware(
        RequireAuthMiddleware(AuthContextMiddleware(app), required_scopes=[]),
        backend=BearerAuthBackend(StaticTokenVerifier(token)))

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        await (app if scope["type"] == "lifespan" else guarded)(scope, receive, send)

    return asgi


def _url_host(host: str) -> str:
    h = host.strip("[]")
    return f"[{h}]" if ":" in h else h


def _loopback_security(host: str) -> TransportSecuritySettings:
    """DNS-rebinding protection (Host/Origin checks) for any loopback host, not only the SDK's three."""
    hosts = ["127.0.0.1", "localhost", "[::1]", _url_host(host)]
    hosts = list(dict.fromkeys(hosts))
    return TransportSecuritySettings(enable_dns_rebinding_protection=True,
                                     allowed_hosts=[f"{h}:*" for h in hosts],
                                     allowed_origins=[f"http://{h}:*" for h in hosts])


def no_oauth(app: ASGIApp) -> ASGIApp:
    """`app` with `/.well-known/*` and `/register` answered 404 (no OAuth server here; see module doc)."""
    missing = JSONResponse({"error": "not_found", "error_description": "kopt-mcp has no OAuth server: send the "
                            "bearer token as `Authorization: Bearer <token>`"}, status_code=404)

    async def asgi(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith("/.well-known/") or path.rstrip("/") == "/register":
            await missing(scope, receive, send)
            return
        await app(scope, receive, send)

    return asgi


def build_http_app(mcp: MCPServer, host: str, token: str | None) -> ASGIApp:
    """The ASGI app: the SDK's streamable HTTP app at /mcp, behind the bearer token when one is set;
    OAuth discovery and registration paths answer 404 either way."""
    security = _loopback_security(host) if is_loopback(host) else None
    app = mcp.streamable_http_app(streamable_http_path=MCP_PATH, host=host, transport_security=security)
    return no_oauth(require_bearer(app, token) if token is not None else app)


def _log_config() -> dict:
    """uvicorn's logging, with the access log on stderr too (stdout stays silent)."""
    import uvicorn.config

    cfg = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    for handler in cfg["handlers"].values():
        handler["stream"] = "ext://sys.stderr"
    return cfg


def serve_http(mcp: MCPServer, host: str, port: int, token: str | None) -> None:
    """Serve `mcp` over streamable HTTP until SIGINT/SIGTERM (call check_policy first)."""
    import uvicorn

    auth = "bearer token required" if token is not None else "NO AUTHENTICATION"
    print(f"kopt-mcp serve: streamable HTTP on http://{_url_host(host)}:{port}{MCP_PATH} ({auth})",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(build_http_app(mcp, host, token), host=host.strip("[]"), port=port, lifespan="on",
                            log_config=_log_config(), timeout_graceful_shutdown=5)
    uvicorn.Server(config).run()
