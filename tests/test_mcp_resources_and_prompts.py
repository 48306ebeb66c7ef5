"""Resources, templates, subscriptions, prompts and completions through the pool (no Django), on the demo server."""

from __future__ import annotations

import asyncio
import base64
import json
import sys

import pytest
from mcp import Client, StdioServerParameters, types

from sessions.mcp.config import ConnectionKey, ServerConfig
from sessions.mcp.failure import ConnectionFailed
from sessions.mcp.pool import ConnectionPool, PoolSettings
from sessions.mcp.resource_subscriptions import ResourceSubscriptions
from sessions.mcp.ssrf import LOCAL_NETWORK
from tests.conftest import DEMO_ARGS, ROOT, connection_pool
from tests.helpers import stdio_demo

GREETING = {"template": "demo://greeting/{name}"}
REVIEW = {"prompt": "review"}


@pytest.fixture(scope="module")
def shared_pool():
    """One pool for the tests that leave their connection as they found it: one server start per transport."""
    with connection_pool(PoolSettings(idle_seconds=600)) as pool:
        yield pool


@pytest.fixture
def pool_settings() -> PoolSettings:
    return PoolSettings(idle_seconds=600)  # the pool's defaults: its periodic health check on


@pytest.fixture(params=["stdio", "http"])
def demo(request) -> ServerConfig:
    if request.param == "stdio":
        return stdio_demo(request_timeout=10)
    url = request.getfixturevalue("demo_http_url")
    return ServerConfig(network=LOCAL_NETWORK, name="demo-http", transport="http", url=url, request_timeout=10)


def key_for(config: ServerConfig, owner: str = "user:1") -> ConnectionKey:
    return ConnectionKey.for_owner(1, config, owner)


class Inbox:
    """An UpdateSink that tests can await, instead of sleeping."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()

    async def __call__(self, uri: str, event: str, message: str) -> None:
        await self.queue.put((uri, event, message))

    async def next(self, timeout: float = 10) -> tuple[str, str, str]:
        return await asyncio.wait_for(self.queue.get(), timeout)


def test_it_lists_every_page_of_resources_and_the_templates(shared_pool, demo):
    pool = shared_pool
    listing = pool.run(pool.list_resources(key_for(demo), demo), timeout=60)
    # The demo hands resources out three to a page: six resources means following one cursor.
    assert [r["uri"] for r in listing["resources"]] == [
        "demo://readme",
        "demo://config.json",
        "demo://square.png",
        "demo://bytes.bin",
        "demo://counter",
        "ui://demo/chart.html",
    ]
    assert listing["resources"][1]["mimeType"] == "application/json"
    assert [t["uriTemplate"] for t in listing["templates"]] == ["demo://greeting/{name}"]
    assert listing["offered"] and listing["subscribe"] and listing["completions"]


def test_it_reads_text_json_images_and_bytes(shared_pool, demo):
    pool = shared_pool
    key = key_for(demo)

    async def read_all():
        return [
            await pool.read_resource(key, demo, uri)
            for uri in ("demo://readme", "demo://config.json", "demo://square.png", "demo://bytes.bin")
        ]

    readme, config, square, raw = (r["contents"][0] for r in pool.run(read_all(), timeout=60))
    assert readme["text"].startswith("This is the portal's demo server.")
    assert json.loads(config["text"])["retries"] == 3
    assert square["mimeType"] == "image/png" and base64.b64decode(square["blob"]).startswith(b"\x89PNG")
    assert base64.b64decode(raw["blob"]) == bytes(range(256))


def test_a_template_filled_in_reads_and_its_variable_completes(shared_pool, demo):
    pool = shared_pool
    key = key_for(demo)

    async def scenario():
        read = await pool.read_resource(key, demo, "demo://greeting/Grace")
        names = await pool.complete(key, demo, GREETING, "name", "al")
        nothing = await pool.complete(key, demo, GREETING, "unknown", "x")
        return read, names, nothing

    read, names, nothing = pool.run(scenario(), timeout=60)
    assert read["contents"][0]["text"] == "Hello, Grace!"
    assert names == {"values": ["Alan", "Alonzo"], "total": 2, "hasMore": False}
    assert nothing["values"] == []


def test_an_unknown_resource_is_a_clear_error_and_the_connection_survives(shared_pool, demo):
    pool, key = shared_pool, key_for(demo)
    before = pool.run(pool.connection(key, demo), timeout=60)
    with pytest.raises(ConnectionFailed) as caught:
        pool.run(pool.read_resource(key, demo, "demo://no-such-thing"), timeout=60)
    assert caught.value.failure.kind == "protocol"
    assert "Unknown resource: demo://no-such-thing" in caught.value.failure.message
    assert pool.run(pool.read_resource(key, demo, "demo://readme"), timeout=60)["contents"]
    assert pool.run(pool.connection(key, demo), timeout=60) is before


def test_it_lists_prompts_gets_one_with_arguments_and_completes_them(shared_pool, demo):
    pool = shared_pool
    key = key_for(demo)

    async def scenario():
        listing = await pool.list_prompts(key, demo)
        got = await pool.get_prompt(key, demo, "review", {"code": "x = 1", "language": "rust"})
        languages = await pool.complete(key, demo, REVIEW, "language", "h")
        return listing, got, languages

    listing, got, languages = pool.run(scenario(), timeout=60)
    prompts = {p["name"]: p for p in listing["prompts"]}
    assert set(prompts) == {"review", "hello"} and listing["completions"]
    assert [(a["name"], a.get("required", False)) for a in prompts["review"]["arguments"]] == [
        ("code", True),
        ("language", False),
        ("focus", False),
    ]
    assert [m["role"] for m in got["messages"]] == ["user", "assistant"]
    assert got["messages"][0]["content"] == {
        "type": "text",
        "text": "Please review this rust code, focusing on readability:\n\nx = 1",
    }
    assert languages["values"] == ["haskell"]


def test_a_prompt_the_server_refuses_is_a_protocol_error_and_the_connection_survives(shared_pool, demo):
    pool = shared_pool
    key = key_for(demo)
    failures = []
    for name, arguments in (("review", {}), ("no_such_prompt", {})):
        with pytest.raises(ConnectionFailed) as caught:
            pool.run(pool.get_prompt(key, demo, name, arguments), timeout=60)
        failures.append(caught.value.failure)
    # The SDK's server answers both (a missing argument, an unknown prompt) with -32603.
    assert [(f.kind, f.message) for f in failures] == [("protocol", "MCP error -32603: Internal server error")] * 2
    assert pool.run(pool.get_prompt(key, demo, "hello", {}), timeout=60)["messages"]


def test_a_subscription_delivers_updates_until_the_last_subscriber_leaves(shared_pool, demo):
    pool = shared_pool
    """2026-07-28 era (the demo negotiates it): one subscriptions/listen stream, re-opened as the set changes."""
    key = key_for(demo)
    inbox = Inbox()

    async def scenario():
        await pool.subscribe_resource(key, demo, "demo://counter", inbox, "tab-1")
        await pool.subscribe_resource(key, demo, "demo://counter", inbox, "tab-1")  # asking twice is asking once
        await pool.subscribe_resource(key, demo, "demo://counter", inbox, "tab-2")
        await pool.call_tool(key, demo, "touch_resource", {})
        first = await inbox.next()
        await pool.read_resource(key, demo, "demo://counter")  # a round trip: any duplicate is in by now
        duplicates = inbox.queue.qsize()
        told_server = [await pool.unsubscribe_resource(key, demo, "demo://counter", "tab-1")]
        await pool.call_tool(key, demo, "touch_resource", {})
        second = await inbox.next()  # the other tab still listens
        told_server.append(await pool.unsubscribe_resource(key, demo, "demo://counter", "tab-2"))
        conn = await pool.connection(key, demo)
        return first, duplicates, second, told_server, conn.subscribed, conn.client.protocol_version

    first, duplicates, second, told_server, still_subscribed, version = pool.run(scenario(), timeout=60)
    assert version == "2026-07-28"
    assert first == second == ("demo://counter", "updated", "") and duplicates == 0
    assert told_server == [False, True] and not still_subscribed


def test_a_subscription_ends_with_a_notice_when_the_connection_goes(pool):
    demo = stdio_demo(request_timeout=10)
    key = key_for(demo)
    inbox = Inbox()

    async def scenario():
        await pool.subscribe_resource(key, demo, "demo://counter", inbox)
        await pool.call_tool(key, demo, "crash", {})
        return await inbox.next()

    uri, event, message = pool.run(scenario(), timeout=60)
    assert (uri, event) == ("demo://counter", "ended") and "connection" in message


def test_a_subscribed_connection_is_not_reaped_as_idle(pool):
    demo = stdio_demo(request_timeout=10)
    key = key_for(demo)
    pool.settings.idle_seconds = 0

    async def scenario():
        await pool.subscribe_resource(key, demo, "demo://counter", Inbox())
        kept = await pool.reap_idle()
        await pool.unsubscribe_resource(key, demo, "demo://counter")
        return kept, await pool.reap_idle()

    assert pool.run(scenario(), timeout=60) == (0, 1)


def test_unsubscribing_without_a_connection_opens_none(pool):
    demo = stdio_demo(request_timeout=10)
    assert pool.run(pool.unsubscribe_resource(key_for(demo), demo, "demo://counter"), timeout=10) is False
    assert len(pool) == 0


def test_handshake_era_subscriptions_use_resources_subscribe():
    """The pool negotiates 2026-07-28 with the demo; the same class on a legacy client uses resources/subscribe."""

    async def scenario():
        holder: dict[str, ResourceSubscriptions] = {}

        async def on_message(message):
            if isinstance(message, types.ResourceUpdatedNotification):
                await holder["subs"].on_notification(str(message.params.uri))

        params = StdioServerParameters(command=sys.executable, args=DEMO_ARGS, cwd=str(ROOT))
        async with Client(params, mode="legacy", message_handler=on_message, cache=None) as client:
            inbox = Inbox()
            subs = holder["subs"] = ResourceSubscriptions(client, inbox)
            await subs.add("demo://counter", "tab", inbox, 10)
            await client.call_tool("touch_resource", {})
            update = await inbox.next()
            told = await subs.remove("demo://counter", "tab", 10)
            await client.call_tool("touch_resource", {})
            # The server was told: a later touch reaches nobody, and a fresh subscription sees only its own.
            await subs.add("demo://counter", "tab", inbox, 10)
            await client.call_tool("touch_resource", {})
            again = await inbox.next()
            return client.protocol_version, update, told, again, inbox.queue.qsize()

    version, update, told, again, left = asyncio.run(scenario())
    assert version == "2025-11-25"
    assert update == again == ("demo://counter", "updated", "")
    assert told is True and left == 0


def test_a_server_without_resources_or_prompts_offers_none():
    """The pool asks only for what the server's capabilities declare."""
    config = ServerConfig(
        network=LOCAL_NETWORK,
        name="tools-only",
        transport="stdio",
        command=sys.executable,
        args=("-c", TOOLS_ONLY_SERVER),
        cwd=str(ROOT),
        request_timeout=10,
    )
    pool = ConnectionPool()
    try:
        key = key_for(config)

        async def scenario():
            return (
                await pool.list_resources(key, config),
                await pool.list_prompts(key, config),
                await pool.complete(key, config, REVIEW, "language", "p"),
            )

        resources, prompts, completion = pool.run(scenario(), timeout=60)
        with pytest.raises(ConnectionFailed) as caught:
            pool.run(pool.subscribe_resource(key, config, "x://y", Inbox()), timeout=60)
    finally:
        pool.shutdown()
    assert resources["offered"] is False and resources["resources"] == []
    assert prompts["offered"] is False and completion["values"] == []
    assert caught.value.failure.kind == "not_offered"


# A low-level server: MCPServer always declares resources and prompts, even with none.
TOOLS_ONLY_SERVER = """
import anyio
from mcp import types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[])

server = Server("tools-only", on_list_tools=list_tools)

async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())

anyio.run(main)
"""
