"""Resource change notifications through the official in-memory client: a client subscribed to the
session's files hears `resources/updated` after a verdict, commit and revert; an unsubscribed one does
not; both the 2025-era resources/subscribe and the 2026-07-28 subscriptions/listen paths."""

from __future__ import annotations

import warnings

import anyio
import pytest
from mcp import Client
from mcp.types import ResourceUpdatedNotification

from kopt_mcp.app.server import build_server
from kopt_mcp.app.tools.notify import PERFORMANCE_URI, REPORT_URI, SESSION_URIS
from kopt_mcp.testing.toy import set_kernel

pytestmark = pytest.mark.anyio


@pytest.fixture
def server(toy_repo, make_referee):
    ref = make_referee(toy_repo)
    ref.run_benchmark()  # baseline: n=1 100 us, n=2 200 us
    return ref, build_server(ref)


def _recorder():
    seen: list[str] = []

    async def on_message(message) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            seen.append(str(message.params.uri))

    return seen, on_message


async def _subscribe(c: Client, uris) -> None:
    with warnings.catch_warnings():  # resources/subscribe is the 2025-era path, deprecated in the SDK
        warnings.simplefilter("ignore")
        for uri in uris:
            await c.subscribe_resource(uri)


async def test_subscribe_is_advertised_and_verdict_announces_every_session_file(server):
    ref, mcp = server
    seen, on_message = _recorder()
    async with Client(mcp, mode="legacy", message_handler=on_message) as c:
        assert c.session.server_capabilities.resources.subscribe
        await _subscribe(c, SESSION_URIS)
        set_kernel(ref.where.workspace_path, {"1": 150.0, "2": 300.0})  # planted: 50% slower
        r = await c.call_tool("save_and_test", {"target": "global", "hypothesis": "planted slowdown"})
        assert not r.is_error
        for _ in range(50):
            if len(seen) >= len(SESSION_URIS):
                break
            await anyio.sleep(0.02)
    assert sorted(seen) == sorted(SESSION_URIS)


async def test_unsubscribed_uri_and_unsubscribed_client_hear_nothing(server):
    ref, mcp = server
    seen_a, on_a = _recorder()
    seen_b, on_b = _recorder()
    async with Client(mcp, mode="legacy", message_handler=on_a) as a, \
            Client(mcp, mode="legacy", message_handler=on_b) as b:
        await _subscribe(a, [PERFORMANCE_URI, REPORT_URI])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            await a.unsubscribe_resource(PERFORMANCE_URI)
        r = await b.call_tool("revert_to_best", {"reason": "nothing to keep"})  # b acts, a subscribed
        assert not r.is_error
        for _ in range(50):
            if seen_a:
                break
            await anyio.sleep(0.02)
    assert seen_a == [REPORT_URI]
    assert seen_b == []


async def test_listen_stream_gets_the_update_on_the_2026_protocol(server):
    ref, mcp = server
    async with Client(mcp, mode="2026-07-28") as c:
        async with c.listen(resource_subscriptions=[REPORT_URI]) as sub:
            r = await c.call_tool("revert_to_best", {"reason": "x"})
            assert not r.is_error
            with anyio.fail_after(10):
                event = await sub.__anext__()
    assert getattr(event, "uri", None) == REPORT_URI


async def test_report_resource_is_the_html_page(server):
    ref, mcp = server
    async with Client(mcp) as c:
        listed = {str(r.uri): r.mime_type for r in (await c.list_resources()).resources}
        page = (await c.read_resource(REPORT_URI)).contents[0].text
    assert listed[REPORT_URI] == "text/html"
    assert page.startswith("<!DOCTYPE html>") and 'id="attempts-table"' in page and "n=1" in page
