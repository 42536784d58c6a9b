"""Resource change notifications: after every verdict, commit and revert, clients that subscribed to
the session's files get `notifications/resources/updated` for each of them.

Two subscription styles reach the same announcement:
- protocol 2026-07-28 (`subscriptions/listen`, which MCPServer serves itself): published on the
  server's subscription bus through `Context.notify_resource_updated`;
- earlier protocol versions (the TypeScript SDK, the Inspector, Claude Code): `resources/subscribe`
  and `resources/unsubscribe`, registered here (this also advertises `resources.subscribe`); each
  subscribed session is sent `send_resource_updated(uri)` directly.

The tool adapters call `announce_session_files(ctx)` after save_and_test, commit_improvement and
revert_to_best. A client that went away is dropped from the registry, never an error for the tool.
"""

from __future__ import annotations

import logging
import weakref

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

from kopt_mcp.app.tools.charts import LAST_VERDICT_URI, PROGRESS_URI

log = logging.getLogger(__name__)

PERFORMANCE_URI = "kopt://performance.md"
REPORT_URI = "kopt://report.html"
SESSION_URIS = (PERFORMANCE_URI, PROGRESS_URI, LAST_VERDICT_URI, REPORT_URI)


def _connection(session):
    """The client connection behind a request's ServerSession. The SDK builds one ServerSession per
    request around the connection object (private `_connection`; no public accessor in mcp 2.3), so a
    subscription must be keyed by the connection to outlive the subscribe request."""
    return getattr(session, "_connection", session)


class Subscribers:
    """The client connections subscribed (resources/subscribe) to each URI of one server, held weakly
    (a closed connection disappears with its subscriptions)."""

    def __init__(self) -> None:
        self._by_session: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def add(self, session, uri: str) -> None:
        """Subscribe the connection `session` to `uri` (idempotent)."""
        self._by_session.setdefault(session, set()).add(uri)

    def remove(self, session, uri: str) -> None:
        """Unsubscribe `session` from `uri` (no error when it was not subscribed)."""
        self._by_session.get(session, set()).discard(uri)

    def drop(self, session) -> None:
        """Forget `session` entirely (it went away)."""
        self._by_session.pop(session, None)

    def sessions_for(self, uri: str) -> list:
        """The sessions subscribed to `uri` now."""
        return [s for s, uris in list(self._by_session.items()) if uri in uris]


_REGISTRY: weakref.WeakKeyDictionary[MCPServer, Subscribers] = weakref.WeakKeyDictionary()


def subscribers(mcp: MCPServer) -> Subscribers:
    """The legacy-subscription registry of `mcp` (created on first use)."""
    return _REGISTRY.setdefault(mcp, Subscribers())


def register(mcp: MCPServer) -> None:
    """Serve `resources/subscribe` and `resources/unsubscribe` on `mcp` (any URI is accepted, as the
    protocol allows; only the session's files are ever announced)."""
    subs = subscribers(mcp)

    async def on_subscribe(ctx: ServerRequestContext, params: SubscribeRequestParams) -> EmptyResult:
        subs.add(_connection(ctx.session), str(params.uri))
        return EmptyResult()

    async def on_unsubscribe(ctx: ServerRequestContext, params: UnsubscribeRequestParams) -> EmptyResult:
        subs.remove(_connection(ctx.session), str(params.uri))
        return EmptyResult()

    low = mcp._lowlevel_server  # the SDK exposes no public hook for these two legacy methods
    low.add_request_handler("resources/subscribe", SubscribeRequestParams, on_subscribe)
    low.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, on_unsubscribe)


async def announce_session_files(ctx: Context, uris: tuple[str, ...] = SESSION_URIS) -> int:
    """Tell subscribed clients that the session's files changed (call after every verdict, commit and
    revert): `resources/updated` for performance.md, both charts and the report, to listen streams and
    to every session subscribed through resources/subscribe. Returns how many legacy notifications
    were sent. Never raises for a client that went away (it is dropped)."""
    sent = 0
    try:
        mcp = ctx.mcp_server
    except ValueError:  # no request context (called outside a request): nobody to tell
        return 0
    subs = subscribers(mcp)
    for uri in uris:
        try:
            await ctx.notify_resource_updated(uri)
        except Exception:  # the bus isolates listeners; a failure here must not fail the tool
            log.debug("publishing %s on the subscription bus failed", uri, exc_info=True)
        for session in subs.sessions_for(uri):
            try:
                await session.send_resource_updated(uri)
                sent += 1
            except Exception:
                log.debug("%s went away: dropped from the subscribers", session, exc_info=True)
                subs.drop(session)
    return sent
