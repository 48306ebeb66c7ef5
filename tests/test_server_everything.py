"""Resources, templates, subscriptions, prompts and completions against @modelcontextprotocol/server-everything.

A third-party server on the TypeScript SDK, over stdio: it negotiates the handshake era
(2025-11-25), so subscriptions go through resources/subscribe and the message handler,
the other path from the demo server's 2026-07-28 subscriptions/listen.
Installed by `make test-servers` (tests/npm); skipped, saying so, when it is not.
"""

from __future__ import annotations

import asyncio
import base64

import pytest

from sessions.mcp.config import ConnectionKey, ServerConfig
from sessions.mcp.failure import ConnectionFailed
from sessions.mcp.ssrf import LOCAL_NETWORK
from tests.conftest import EVERYTHING, EVERYTHING_MISSING, NODE, connection_pool

pytestmark = pytest.mark.skipif(not EVERYTHING.exists(), reason=EVERYTHING_MISSING)


@pytest.fixture(scope="module")
def everything():
    config = ServerConfig(
        network=LOCAL_NETWORK,
        name="everything",
        transport="stdio",
        command=NODE,
        args=(str(EVERYTHING), "stdio"),
        request_timeout=15,
    )
    with connection_pool() as pool:
        yield pool, config, ConnectionKey.for_owner(1, config, "user:1")


def test_it_lists_reads_and_fills_templates(everything):
    pool, config, key = everything

    async def scenario():
        listing = await pool.list_resources(key, config)
        first = await pool.read_resource(key, config, listing["resources"][0]["uri"])
        text = await pool.read_resource(key, config, "demo://resource/dynamic/text/7")
        blob = await pool.read_resource(key, config, "demo://resource/dynamic/blob/7")
        conn = await pool.connection(key, config)
        return listing, first, text, blob, conn.client.protocol_version

    listing, first, text, blob, version = pool.run(scenario(), timeout=60)
    assert version == "2025-11-25"
    assert listing["offered"] and listing["subscribe"] and listing["completions"]
    assert len(listing["resources"]) >= 5
    assert {t["uriTemplate"] for t in listing["templates"]} >= {
        "demo://resource/dynamic/text/{resourceId}",
        "demo://resource/dynamic/blob/{resourceId}",
    }
    assert first["contents"][0]["text"]
    assert text["contents"][0]["text"].startswith("Resource 7: This is a plaintext resource")
    assert base64.b64decode(blob["contents"][0]["blob"]).startswith(b"Resource 7: This is a base64 blob")


def test_prompts_with_arguments_and_context_aware_completions(everything):
    pool, config, key = everything
    team = {"prompt": "completable-prompt"}

    async def scenario():
        listing = await pool.list_prompts(key, config)
        got = await pool.get_prompt(key, config, "args-prompt", {"city": "Lisbon", "state": "Lisboa"})
        departments = await pool.complete(key, config, team, "department", "S")
        # The second argument's suggestions depend on the first one, passed as context.
        names = await pool.complete(key, config, team, "name", "", {"department": "Sales"})
        return listing, got, departments, names

    listing, got, departments, names = pool.run(scenario(), timeout=60)
    assert {"simple-prompt", "args-prompt", "completable-prompt"} <= {p["name"] for p in listing["prompts"]}
    assert "Lisbon" in got["messages"][0]["content"]["text"]
    assert departments["values"] == ["Sales", "Support"]
    assert names["values"] == ["David", "Eve", "Frank"]


def test_subscriptions_in_the_handshake_era(everything):
    pool, config, key = everything
    updates: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()

    async def sink(uri: str, event: str, message: str) -> None:
        await updates.put((uri, event, message))

    async def scenario():
        uri = (await pool.list_resources(key, config))["resources"][0]["uri"]
        await pool.subscribe_resource(key, config, uri, sink)
        # The server sends one update at once, then one every 5 s, for every subscribed URI.
        await pool.call_tool(key, config, "toggle-subscriber-updates", {})
        update = await asyncio.wait_for(updates.get(), 10)
        told = await pool.unsubscribe_resource(key, config, uri)
        return uri, update, told

    uri, update, told = pool.run(scenario(), timeout=60)
    assert update == (uri, "updated", "") and told is True


def test_an_unknown_template_value_is_the_servers_error(everything):
    pool, config, key = everything
    with pytest.raises(ConnectionFailed) as caught:
        pool.run(pool.read_resource(key, config, "demo://resource/dynamic/text/not-a-number"), timeout=60)
    assert caught.value.failure.kind == "protocol" and "not-a-number" in caught.value.failure.message
