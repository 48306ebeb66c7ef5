"""Resources, prompts, completions and subscriptions over the playground WebSocket, through a real worker."""

from __future__ import annotations

import json
import time

import pytest
from channels.db import database_sync_to_async
from django.conf import settings

from servers.models import Server
from tests.ws import Playground, run, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def test_it_lists_resources_and_templates_and_records_the_counts(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send({"type": "list_resources", "ref": "l1", "server": demo_server.pk})
            return await ws.until("resources", ref="l1")

    listing = run(scenario())
    # Five resources and the chart's app (ui://demo/chart.html).
    assert len(listing["resources"]) == 6 and listing["templates"][0]["uriTemplate"] == "demo://greeting/{name}"
    assert listing["subscribe"] is True and listing["completions"] is True
    demo_server.refresh_from_db()
    assert (demo_server.resource_count, demo_server.template_count) == (6, 1)


def test_it_reads_a_resource_and_a_filled_in_template(bob, demo_server):
    """Bob is a member, not an admin: using a server's resources needs only membership."""
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send({"type": "read_resource", "ref": "r1", "server": demo_server.pk, "uri": "demo://config.json"})
            config = await ws.until("resource.read", ref="r1")
            await ws.send(
                {"type": "read_resource", "ref": "r2", "server": demo_server.pk, "uri": "demo://greeting/Ada"}
            )
            greeting = await ws.until("resource.read", ref="r2")
            await ws.send({"type": "read_resource", "ref": "r3", "server": demo_server.pk, "uri": "demo://missing"})
            missing = await ws.until("resource.read", ref="r3")
            return config, greeting, missing

    config, greeting, missing = run(scenario())
    assert config["uri"] == "demo://config.json"
    assert json.loads(config["contents"][0]["text"])["theme"] == "dark"
    assert greeting["contents"][0]["text"] == "Hello, Ada!"
    assert missing["error"]["kind"] == "protocol" and "Unknown resource" in missing["error"]["message"]


def test_it_lists_and_gets_prompts_and_completes_arguments(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send({"type": "list_prompts", "ref": "p1", "server": demo_server.pk})
            listing = await ws.until("prompts", ref="p1")
            await ws.send(
                {
                    "type": "get_prompt",
                    "ref": "p2",
                    "server": demo_server.pk,
                    "name": "review",
                    "arguments": {"code": "print(1)", "focus": "tests"},
                }
            )
            got = await ws.until("prompt.got", ref="p2")
            await ws.send(
                {
                    "type": "complete",
                    "ref": "c1",
                    "server": demo_server.pk,
                    "prompt": "review",
                    "argument": "language",
                    "value": "j",
                }
            )
            language = await ws.until("completion", ref="c1")
            await ws.send(
                {
                    "type": "complete",
                    "ref": "c2",
                    "server": demo_server.pk,
                    "template": "demo://greeting/{name}",
                    "argument": "name",
                    "value": "",
                }
            )
            names = await ws.until("completion", ref="c2")
            return listing, got, language, names

    listing, got, language, names = run(scenario())
    assert {p["name"] for p in listing["prompts"]} == {"review", "hello"}
    assert got["name"] == "review" and got["messages"][0]["content"]["text"].endswith("focusing on tests:\n\nprint(1)")
    assert (language["prompt"], language["argument"], language["values"]) == ("review", "language", ["javascript"])
    assert names["template"] == "demo://greeting/{name}" and len(names["values"]) == 6
    demo_server.refresh_from_db()
    assert demo_server.prompt_count == 2


def test_a_subscription_brings_live_updates_until_unsubscribed(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send(
                {"type": "subscribe_resource", "ref": "s1", "server": demo_server.pk, "uri": "demo://counter"}
            )
            subscribed = await ws.until("resource.subscribed", ref="s1")
            # touch_resource changes state (no read-only hint), so the default policy asks first.
            touched = await ws.call(demo_server.pk, "touch_resource", approve="allow_once")
            # The update may arrive before the call's end, which ws.call reads past.
            early = [e for e in ws.seen if e["type"] == "resource.updated"]
            updated = early[0] if early else await ws.until("resource.updated", uri="demo://counter")
            await ws.send(
                {"type": "unsubscribe_resource", "ref": "u1", "server": demo_server.pk, "uri": "demo://counter"}
            )
            unsubscribed = await ws.until("resource.unsubscribed", ref="u1")

            return subscribed, touched, updated, unsubscribed, [e for e in ws.seen if e["type"] == "resource.updated"]

    subscribed, touched, updated, unsubscribed, updates = run(scenario())
    assert "error" not in subscribed and touched["status"] == "succeeded"
    assert len(updates) == 1  # one touch, one notice
    assert updated == {"type": "resource.updated", "server": demo_server.pk, "uri": "demo://counter"}
    assert "error" not in unsubscribed


@pytest.mark.skipif(
    not settings.EMBEDDED, reason="looks inside the worker's pool, which is in-process only when embedded"
)
def test_closing_the_socket_gives_its_subscriptions_back(alice, demo_server):
    from sessions.worker import get_pool

    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send(
                {"type": "subscribe_resource", "ref": "s1", "server": demo_server.pk, "uri": "demo://counter"}
            )
            await ws.until("resource.subscribed", ref="s1")

    run(scenario())  # it saw resource.subscribed, so the worker held the subscription
    pool = get_pool()

    def demo_subscribed() -> bool:
        return any(conn.subscribed for conn in list(pool._connections.values()) if conn.config.name == "demo")

    # The socket's close may release the subscription before this line runs: wait, don't snapshot.
    deadline = time.monotonic() + 20
    while demo_subscribed() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not demo_subscribed()


@pytest.mark.skipif(
    not settings.EMBEDDED, reason="looks inside the worker's pool, which is in-process only when embedded"
)
def test_a_page_closed_after_its_server_was_disabled_still_gives_its_subscriptions_back(alice, demo_server):
    from sessions.worker import get_pool

    cookie = session_cookie(alice)
    pool = get_pool()

    def held() -> bool:
        return any(conn.subscribed for key, conn in list(pool._connections.items()) if key.server_id == demo_server.pk)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send(
                {"type": "subscribe_resource", "ref": "s1", "server": demo_server.pk, "uri": "demo://counter"}
            )
            await ws.until("resource.subscribed", ref="s1")
            await database_sync_to_async(Server.objects.filter(pk=demo_server.pk).update)(enabled=False)

    run(scenario())
    deadline = time.monotonic() + 20
    while held() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not held()


def test_another_team_cannot_use_any_of_it_and_disabled_servers_refuse(carol, alice, demo_server):
    messages = [
        {"type": "list_resources"},
        {"type": "read_resource", "uri": "demo://readme"},
        {"type": "subscribe_resource", "uri": "demo://counter"},
        {"type": "list_prompts"},
        {"type": "get_prompt", "name": "hello"},
        {"type": "complete", "prompt": "review", "argument": "language", "value": "p"},
    ]
    carol_cookie, alice_cookie = session_cookie(carol), session_cookie(alice)

    async def each(cookie):
        async with Playground(cookie) as ws:
            replies = []
            for number, message in enumerate(messages):
                await ws.send({**message, "server": demo_server.pk, "ref": number})
                replies.append(await ws.until("error", ref=number))
            return replies, [e["type"] for e in ws.seen]

    carol_replies, carol_seen = run(each(carol_cookie))
    assert [r["message"] for r in carol_replies] == ["Unknown server."] * len(messages)
    assert set(carol_seen) == {"error"}  # nothing of Acme's server reached her
    demo_server.enabled = False
    demo_server.save()
    alice_replies, _ = run(each(alice_cookie))
    assert [r["message"] for r in alice_replies] == ["demo is disabled."] * len(messages)


def test_malformed_resource_and_prompt_messages_get_clear_errors(alice, demo_server):
    server = demo_server.pk
    bad = [
        ({"type": "read_resource", "server": server}, "'uri' must be a string"),
        ({"type": "read_resource", "server": server, "uri": "x" * 3000}, "'uri' must be a string"),
        ({"type": "get_prompt", "server": server, "name": "review", "arguments": {"code": 1}}, "'arguments' must be"),
        ({"type": "get_prompt", "server": server, "name": "review", "arguments": ["x"]}, "'arguments' must be"),
        ({"type": "complete", "server": server, "argument": "a", "value": ""}, "Say what to complete"),
        ({"type": "complete", "server": server, "prompt": "p", "template": "t", "argument": "a"}, "Say what"),
        ({"type": "complete", "server": server, "prompt": "review", "value": "x"}, "'argument' must be"),
        ({"type": "complete", "server": server, "prompt": "review", "argument": "a", "context": {"x": 2}}, "'context'"),
        ({"type": "unsubscribe_resource", "server": "1", "uri": "demo://counter"}, "'server' must be"),
    ]
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            replies = []
            for number, (message, _) in enumerate(bad):
                await ws.send({**message, "ref": number})
                replies.append(await ws.until("error", ref=number))
            await ws.send({"type": "list_prompts", "ref": "ok", "server": server})
            return replies, await ws.until("prompts", ref="ok")

    replies, still_there = run(scenario())
    for reply, (_, expected) in zip(replies, bad, strict=True):
        assert expected in reply["message"], reply
    assert still_there["prompts"]


def test_test_connection_counts_resources_and_prompts_for_the_list_and_an_edit_keeps_them(alice, demo_server):
    from django.test import Client

    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send({"type": "test_connection", "server": demo_server.pk})
            return await ws.until("connection.tested", server=demo_server.pk)

    tested = run(scenario())
    assert (tested["resource_count"], tested["template_count"], tested["prompt_count"]) == (6, 1, 2)
    demo_server.refresh_from_db()
    assert (demo_server.resource_count, demo_server.template_count, demo_server.prompt_count) == (6, 1, 2)
    client = Client()
    client.force_login(alice)
    row = client.get("/servers/").content.decode().split(f'id="server-{demo_server.pk}"')[-1].split("</tr>")[0]
    assert "<td>6 <span" in row and "+ 1 template" in row and "<td>2</td>" in row

    # Saving the edit form with a new description (every field is sent again) keeps the counts.
    initial = client.get(f"/servers/{demo_server.pk}/edit/").context["form"].initial
    data = {k: v for k, v in initial.items() if v not in (None, False)}
    data.update(team=demo_server.team_id, description="The demo, described")
    data = {k: ("on" if v is True else v) for k, v in data.items()}
    response = client.post(f"/servers/{demo_server.pk}/edit/", data)
    assert response.status_code == 302, response.context["form"].errors if response.context else response
    demo_server.refresh_from_db()
    assert demo_server.description == "The demo, described"
    assert (demo_server.resource_count, demo_server.prompt_count) == (6, 2) and demo_server.tools
