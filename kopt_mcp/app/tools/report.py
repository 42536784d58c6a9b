"""The session report as MCP surface: the resource kopt://report.html and, under `serve --http`, the
page at GET /report (behind the same bearer token as /mcp: the route is part of the app that
kopt_mcp.app.http wraps).

Both serve the report file the referee writes after every verdict (`report_html.write_session_report`)
and render it afresh (in a worker thread, one at a time) when the file is missing or older than the
ledger or performance.md, so a reader never gets a stale page.
"""

from __future__ import annotations

import threading
from pathlib import Path

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from kopt_mcp.app.tools.notify import REPORT_URI
from kopt_mcp.referee import Referee
from kopt_mcp.views.report_html import REPORT_NAME, write_session_report

REPORT_PATH = "/report"
_RENDER = threading.Lock()


def _mtime(p: Path) -> float:
    return p.stat().st_mtime if p.exists() else 0.0


def current_report(ref: Referee) -> str:
    """The report page of `ref`'s session (UTF-8 HTML): the written file when it is at least as new as
    the ledger and performance.md, else rendered and written now. Raises what rendering raises."""
    with _RENDER:
        path = Path(ref.books.store.root) / REPORT_NAME
        newest_input = max(_mtime(ref.books.store.ledger_path), _mtime(ref.where.workspace_path / "performance.md"))
        if not path.exists() or _mtime(path) < newest_input:
            path = write_session_report(ref, strict=True)
        return path.read_text(encoding="utf-8")


def register(mcp: MCPServer, ref: Referee) -> None:
    """Register kopt://report.html and the HTTP route GET /report for `ref`'s session."""

    @mcp.resource(REPORT_URI, name="report.html", mime_type="text/html",
                  description="The session as one self-contained HTML page: BEST per config class, charts, every "
                  "attempt with verdict, reason, per-class deltas and diff, kept commits, Stop Summary.")
    async def report_html() -> str:
        return await anyio.to_thread.run_sync(current_report, ref)

    @mcp.custom_route(REPORT_PATH, methods=["GET"], name="report", include_in_schema=False)
    async def report_page(_request: Request) -> Response:
        page = await anyio.to_thread.run_sync(current_report, ref)
        # the page has no script and loads nothing (its own CSP says so); no caching of session data
        return HTMLResponse(page, headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"})
