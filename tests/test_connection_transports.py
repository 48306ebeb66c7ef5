"""The pool over every transport and both protocol eras, against the real demo server."""

from __future__ import annotations

import asyncio

import pytest

from sessions.mcp.config import ConnectionKey, ServerConfig
from sessions.mcp.pool import PoolEvents
from sessions.mcp.ssrf import LOCAL_NETWORK
from sessions.mcp.transports import HttpTrace, _http_client
from tests.helpers import stdio_demo


class Recorder(PoolEvents):
    def __init__(self) -> None:
        self.statuses: list[tuple[str, str]] = []
        self.changed: list[ConnectionKey] = []
        self.tools_changed_event = asyncio.Event()

    async def status(self, key, config, status, failure):
        self.statuses.append((key.owner, status))

    async def tools_changed(self, key, config):
        self.changed.append(key)
        self.tools_changed_event.set()


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def pool_events(recorder):
    """The `pool` fixture tells the recorder, which the tests read."""
    return recorder


@pytest.fixture(params=["stdio", "http", "sse", "websocket"])
def transport_config(request) -> ServerConfig:
    transport = request.param
    if transport == "stdio":
        return stdio_demo()
    url = request.getfixturevalue(
        {"http": "demo_http_url", "sse": "demo_sse_url", "websocket": "demo_websocket_url"}[transport]
    )
    return ServerConfig(
        network=LOCAL_NETWORK, name="demo", transport=transport, url=url, headers={"X-Portal-Test": "1"}
    )


@pytest.mark.parametrize("protocol,era", [("auto", "modern"), ("legacy", "legacy")])
def test_it_calls_tools_with_progress_over_every_transport_in_both_eras(pool, transport_config, protocol, era):
    from dataclasses import replace

    config = replace(transport_config, protocol=protocol)
    key = ConnectionKey.for_owner(1, config, "user:1")
    progress: list[float] = []

    async def on_progress(value, total, message):
        progress.append(value)

    async def scenario():
        outcome = await pool.call_tool(key, config, "count", {"steps": 3, "delay": 0.01}, on_progress=on_progress)
        conn = await pool.connection(key, config)
        tools = await pool.list_tools(key, config)
        return outcome, conn.negotiated, tools

    outcome, negotiated, tools = pool.run(scenario(), timeout=60)
    assert outcome.status == "succeeded", outcome.failure
    assert outcome.result["content"][0]["text"] == "counted to 3"
    assert progress == [1, 2, 3]
    assert negotiated.era == era
    assert negotiated.protocol_version == ("2026-07-28" if era == "modern" else "2025-11-25")
    echo = next(t for t in tools if t["name"] == "echo")
    assert echo["full_name"] == "mcp__demo__echo" and echo["summary"] == "Echo back the given message."


@pytest.mark.parametrize("protocol", ["auto", "legacy"])
def test_a_list_changed_notification_drops_the_cached_tools_and_is_reported(pool, recorder, protocol):
    config = stdio_demo(protocol=protocol)
    key = ConnectionKey.for_owner(1, config, "user:1")

    async def scenario():
        before = {t["name"] for t in await pool.list_tools(key, config)}
        toggled = await pool.call_tool(key, config, "toggle_tool", {})
        await asyncio.wait_for(recorder.tools_changed_event.wait(), 10)
        conn = await pool.connection(key, config)
        cached = conn.tools
        after = {t["name"] for t in await pool.list_tools(key, config)}
        return before, toggled, cached, after

    before, toggled, cached, after = pool.run(scenario(), timeout=60)
    assert toggled.result["content"][0]["text"] == "added"
    assert cached is None, "the cached list must be dropped when the server says it changed"
    assert after - before == {"extra"}
    assert set(recorder.changed) == {key}


def test_it_reports_pending_then_connected_then_closed(pool, recorder):
    config = stdio_demo()
    key = ConnectionKey.for_owner(1, config, "user:7")
    pool.run(pool.call_tool(key, config, "echo", {"message": "x"}), timeout=60)
    pool.run(pool.drop(key), timeout=30)
    assert recorder.statuses == [("user:7", "pending"), ("user:7", "connected"), ("user:7", "closed")]


def test_no_read_timeout_is_put_on_the_long_lived_http_streams():
    config = ServerConfig(
        network=LOCAL_NETWORK, name="x", transport="http", url="http://127.0.0.1:1/mcp", connect_timeout=7
    )
    client = _http_client(config, HttpTrace())
    assert client.timeout.read is None and client.timeout.connect == 7
