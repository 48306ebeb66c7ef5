"""Attacks on the playground's WebSocket: confused types, deep nesting, other origins, oversize and
binary frames, anonymous sockets, and a disabled server's process started through a side door."""

from __future__ import annotations

import json
import logging
import time
import uuid

import pytest
from channels.db import database_sync_to_async
from websockets.exceptions import ConnectionClosed, InvalidStatus

from servers.models import Server
from sessions import worker
from sessions.messages import MAX_DEPTH, MAX_MESSAGE_BYTES, TOO_DEEP
from sessions.models import ToolCall
from tests.conftest import DEMO_ARGS, DEMO_COMMAND, ROOT, server_processes
from tests.security.conftest import DaphneSocket
from tests.ws import Playground, run, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def nested(depth: int, leaf: object = "x") -> object:
    """`depth` arrays one inside another around `leaf`."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def deep_text(depth: int) -> str:
    # Built as text: Python's own encoder would hit its recursion limit writing the attack.
    return '{"type": "call", "server": 1, "tool": "echo", "arguments": {"deep": ' + "[" * depth + "]" * depth + "}}"


async def answered(ws, message) -> dict:
    await ws.send(message)
    return await ws.receive()


def test_confused_types_get_an_error_and_the_socket_stays_open(alice, demo_server, worker):
    server = demo_server.pk
    attacks = [
        {"type": ["call"]},
        {"type": {"a": 1}},
        {"type": 7},
        {"type": 1.5},
        {"type": True},
        {"type": None},
        {"type": "call", "ref": ["r"], "server": server, "tool": "echo"},
        {"type": "call", "ref": {"a": 1}, "server": server, "tool": "echo"},
        {"type": "call", "ref": True, "server": server, "tool": "echo"},
        {"type": "call", "server": [server], "tool": "echo"},
        {"type": "call", "server": {"id": server}, "tool": "echo"},
        {"type": "call", "server": server, "tool": ["echo"]},
        {"type": "call", "server": server, "tool": "echo", "arguments": ["message"]},
        {"type": "list_tools", "server": str(server)},
        {"type": "list_tools", "server": server, "refresh": "yes"},
        {"type": "test_connection", "server": 1.0},
        {"type": "cancel_call", "call": ["x"]},
        {"type": "answer_elicitation", "elicitation": {"a": 1}, "action": "accept"},
        {"type": "answer_elicitation", "elicitation": str(uuid.uuid4()), "action": ["accept"]},
        {"type": "answer_sampling", "sampling": str(uuid.uuid4()), "action": {"approve": 1}},
        {"type": "read_resource", "server": server, "uri": {"u": 1}},
        {"type": "subscribe_resource", "server": server, "uri": ["demo://counter"]},
        {"type": "unsubscribe_resource", "server": None, "uri": "demo://counter"},
        {"type": "get_prompt", "server": server, "name": "hello", "arguments": [["a", "b"]]},
        {"type": "complete", "server": server, "prompt": ["review"], "argument": "language"},
        {"type": "complete", "server": server, "template": 5, "argument": "language"},
        {"type": "answer_approval", "approval": 12, "answer": "allow_once"},
    ]
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            replies = [await answered(ws, attack) for attack in attacks]
            return replies, await ws.call(server, "echo", {"message": "still here"})

    replies, after = run(scenario())
    for attack, reply in zip(attacks, replies, strict=True):
        assert reply["type"] == "error" and reply.get("kind") != "internal", (attack, reply)
        assert "Traceback" not in reply["message"]
    assert replies[0]["message"].startswith("Unknown message type of the wrong kind")
    assert after["status"] == "succeeded"  # the same socket, after every attack
    assert ToolCall.objects.count() == 1


def test_nesting_past_the_cap_is_refused_with_a_clear_error(alice, demo_server, worker):
    cookie = session_cookie(alice)
    server = demo_server.pk

    async def scenario():
        async with Playground(cookie) as ws:
            replies = [await answered(ws, deep_text(depth)) for depth in (950, 100_000)]
            # The message itself is one level and `arguments` another: this `deep` holds the rest.
            at_cap = {"type": "call", "server": server, "tool": "echo", "arguments": {"deep": nested(MAX_DEPTH - 2)}}
            past_cap = {**at_cap, "arguments": {"deep": nested(MAX_DEPTH - 1)}}
            replies.append(await answered(ws, past_cap))
            await ws.send(at_cap)
            accepted = await ws.until("call.accepted")
            return replies, accepted, await ws.call(server, "echo", {"message": "still here"})

    replies, accepted, after = run(scenario())
    assert [r["message"] for r in replies] == [TOO_DEEP] * 3
    assert "64 levels" in TOO_DEEP
    assert accepted["tool"] == "echo"  # at the cap: taken (the tool's schema then has its say)
    assert after["status"] == "succeeded"


def test_a_fault_while_handling_a_message_is_an_error_reply_logged_once(alice, monkeypatch, caplog):
    from sessions import actions

    def broken(user):
        raise RuntimeError("secret internals: /srv/portal/var")

    monkeypatch.setattr(actions, "do_list_pending_approvals", broken)
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            fault = await answered(ws, {"type": "list_approvals", "ref": "a1"})
            again = await answered(ws, {"type": "list_approvals", "ref": "a2"})
            other = await answered(ws, {"type": "nope"})
            return fault, again, other

    with caplog.at_level(logging.ERROR, logger="sessions.consumers"):
        fault, again, other = run(scenario())
    assert fault == {
        "type": "error",
        "ref": "a1",
        "kind": "internal",
        "message": "The portal failed to handle this message; it was logged.",
    }
    assert again["ref"] == "a2" and again["kind"] == "internal"  # the socket stayed open
    assert other["type"] == "error"
    logged = [r for r in caplog.records if r.name == "sessions.consumers"]
    assert len(logged) == 2 and all("secret internals" in r.exc_text for r in logged)


def test_a_page_of_another_port_scheme_or_host_cannot_open_the_socket(alice, settings):
    cookie = session_cookie(alice)

    async def opened(origin: bytes, host: bytes = b"127.0.0.1:8000") -> bool:
        async with Playground(cookie, origin=origin, host=host) as ws:
            return ws.connected

    async def scenario():
        return {
            "own": await opened(b"http://127.0.0.1:8000"),
            "own, default port spelled out": await opened(b"http://127.0.0.1:80", host=b"127.0.0.1"),
            "another port": await opened(b"http://127.0.0.1:9999"),
            "another scheme": await opened(b"https://127.0.0.1:8000"),
            "another host": await opened(b"http://localhost:8000"),
            "a rebound name": await opened(b"http://evil.example:8000", host=b"evil.example:8000"),
            "null": await opened(b"null"),
            "listed": await opened(b"https://portal.example.com"),
        }

    settings.PORTAL_WEBSOCKET_ORIGINS = []
    refused_unlisted = run(scenario())
    assert refused_unlisted == {
        "own": True,
        "own, default port spelled out": True,
        "another port": False,
        "another scheme": False,
        "another host": False,
        "a rebound name": False,
        "null": False,
        "listed": False,
    }
    settings.PORTAL_WEBSOCKET_ORIGINS = ["https://portal.example.com"]
    assert run(scenario())["listed"] is True


# -- a disabled server ---------------------------------------------------------------------------


@pytest.fixture
def marked_server(alice):
    """The demo server with a token on its command line, to find its process by; disabled."""
    token = f"marked-{uuid.uuid4().hex}"
    server = Server.objects.create(
        team=alice.memberships.get().team,
        name="demo",
        transport="stdio",
        command=DEMO_COMMAND,
        args=[*DEMO_ARGS, "stdio", "--host", token],
        cwd=str(ROOT),
        request_timeout=10,
        enabled=False,
        created_by=alice,
    )
    server.token = token
    return server


def test_nothing_reaches_a_disabled_servers_process(alice, marked_server, worker):
    server = marked_server.pk
    doors = [
        {"type": "list_tools", "server": server, "refresh": True},
        {"type": "test_connection", "server": server},
        {"type": "list_resources", "server": server},
        {"type": "read_resource", "server": server, "uri": "demo://readme"},
        {"type": "subscribe_resource", "server": server, "uri": "demo://counter"},
        {"type": "list_prompts", "server": server},
        {"type": "get_prompt", "server": server, "name": "hello"},
        {"type": "complete", "server": server, "prompt": "review", "argument": "language", "value": "p"},
        {"type": "complete", "server": server, "template": "demo://notes/{name}", "argument": "name"},
    ]
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            replies = [await answered(ws, {**door, "ref": n}) for n, door in enumerate(doors)]
            return replies, await ws.call(server, "echo", {"message": "x"})

    replies, called = run(scenario())
    for door, reply in zip(doors, replies, strict=True):
        assert (reply["type"], reply["kind"], reply["message"]) == ("error", "server_disabled", "demo is disabled."), (
            door
        )
    assert (called["status"], called["error_kind"], called["error"]) == (
        "rejected",
        "server_disabled",
        "demo is disabled.",
    )
    time.sleep(0.5)  # a process started anyway would be running by now
    assert server_processes(marked_server.token) == []

    # The same server enabled: the token finds its process, so the check above could fail.
    Server.objects.filter(pk=server).update(enabled=True)

    async def listed():
        async with Playground(cookie) as ws:
            await ws.send({"type": "list_tools", "server": server})
            return await ws.until("tools", server=server)

    assert "echo" in {tool["name"] for tool in run(listed())["tools"]}
    assert server_processes(marked_server.token) != []


def test_a_server_disabled_after_the_door_is_refused_by_the_worker_too(alice, marked_server):
    # The consumer checked and queued; then an admin disabled the server before the worker began.
    server = marked_server.pk
    cookie = session_cookie(alice)
    work = [
        (worker.execute_list_tools, (server, alice.pk, True), "tools"),
        (worker.execute_test_connection, (server, alice.pk), "connection.tested"),
        (worker.execute_list_resources, (server, alice.pk, "r"), "resources"),
        (worker.execute_read_resource, (server, alice.pk, "demo://readme", "r"), "resource.read"),
        (worker.execute_list_prompts, (server, alice.pk, "r"), "prompts"),
        (worker.execute_get_prompt, (server, alice.pk, "hello", {}, "r"), "prompt.got"),
        (worker.execute_subscribe_resource, (server, alice.pk, "demo://counter", "nobody", "r"), "resource.subscribed"),
    ]

    async def scenario():
        async with Playground(cookie) as ws:
            events = []
            for function, args, answer in work:
                await database_sync_to_async(function)(*args)
                events.append(await ws.until(answer))
            return events

    events = run(scenario())
    for event in events:
        refusal = event["error"] if "error" in event else event
        assert (refusal["kind"], refusal["message"]) == ("server_disabled", "demo is disabled."), event
    assert events[1]["ok"] is False
    marked_server.refresh_from_db()
    assert marked_server.last_tested_at is None and marked_server.tools == []  # nothing was tried
    assert server_processes(marked_server.token) == []


# -- through real Daphne ---------------------------------------------------------------------------


def test_through_daphne_an_anonymous_socket_closes_with_4401(daphne_portal):
    async def scenario():
        async with DaphneSocket(daphne_portal, None) as ws:
            with pytest.raises(ConnectionClosed) as closed:
                await ws.receive()
            return closed.value.rcvd.code

    assert run(scenario()) == 4401


def test_through_daphne_another_ports_origin_is_refused_and_the_pages_own_accepted(alice, daphne_portal):
    cookie = session_cookie(alice)

    async def scenario():
        with pytest.raises(InvalidStatus) as refused:
            async with DaphneSocket(daphne_portal, cookie, origin="http://127.0.0.1:9999"):
                pass
        async with DaphneSocket(daphne_portal, cookie) as ws:
            reply = await answered(ws, {"type": "list_approvals", "ref": "own"})
        return refused.value.response.status_code, reply

    status, reply = run(scenario())
    assert status == 403
    assert reply["type"] == "approvals" and reply["ref"] == "own"


def test_through_daphne_size_limits_and_binary_frames(alice, daphne_portal):
    cookie = session_cookie(alice)
    padding = MAX_MESSAGE_BYTES  # a message just over the portal's limit, under Daphne's 1 MiB
    over_ours = json.dumps({"type": "list_approvals", "pad": "x" * padding})
    # Characters under the limit, UTF-8 bytes over it: the limit is in bytes.
    wide = json.dumps({"type": "list_approvals", "pad": "é" * (MAX_MESSAGE_BYTES // 2 + 10)}, ensure_ascii=False)
    under = json.dumps({"type": "list_approvals", "ref": "under", "pad": "x" * (MAX_MESSAGE_BYTES - 100)})

    async def scenario():
        async with DaphneSocket(daphne_portal, cookie) as ws:
            replies = [
                await answered(ws, over_ours),
                await answered(ws, wide),
                await answered(ws, b'{"type": "list_approvals"}'),
                await answered(ws, bytes(range(256))),
                await answered(ws, under),
            ]
            # Over Daphne's own limit (1 MiB a message): Daphne (autobahn) drops the TCP connection, no
            # close frame (the page sees 1006 and reconnects); the portal goes on serving.
            await ws.send("x" * (1024 * 1024 + 1))
            with pytest.raises(ConnectionClosed) as closed:
                await ws.receive()
        async with DaphneSocket(daphne_portal, cookie) as ws:
            replies.append(await answered(ws, {"type": "list_approvals", "ref": "next"}))
        return replies, closed.value.rcvd

    replies, close_frame = run(scenario())
    limit = f"Messages are limited to {MAX_MESSAGE_BYTES} bytes."
    assert [r["message"] for r in replies[:2]] == [limit, limit]
    assert [r["message"] for r in replies[2:4]] == ["Send JSON text frames."] * 2
    assert replies[4]["type"] == "approvals" and replies[4]["ref"] == "under"
    assert len(wide) < MAX_MESSAGE_BYTES < len(wide.encode())
    assert close_frame is None
    assert replies[5]["type"] == "approvals" and replies[5]["ref"] == "next"
