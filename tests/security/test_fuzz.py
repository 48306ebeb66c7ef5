"""Fuzzing the two front doors: the playground's WebSocket messages and the server registration form.

`make test` runs a sample; `make test-slow` (PORTAL_SLOW_TESTS=1) runs many more (the figures are below
and in docs/security.md). Every WebSocket message must get its answer (never a closed socket or an
unhandled exception), the socket must still answer afterwards, and no call may be left running; the
form must never answer 500.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import pytest
from channels.layers import channel_layers
from django.conf import settings as django_settings
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed

from servers.models import Server
from sessions.consumers import PlaygroundConsumer
from sessions.messages import MAX_DEPTH
from sessions.models import FINISHED, ToolCall
from tests.security.conftest import DaphneSocket
from tests.ws import Playground, session_cookie

SLOW = bool(os.environ.get("PORTAL_SLOW_TESTS"))
# Socket cases in this process (WebsocketCommunicator) and through a real Daphne; form cases.
CASES = 5000 if SLOW else 300
DAPHNE_CASES = 1000 if SLOW else 60
FORM_CASES = 5000 if SLOW else 150
# The one answer each message gets, whatever its type: the consumer's own, or a worker's.
ANSWERS = {
    "error",
    "call.accepted",
    "tools",
    "connection.tested",
    "cancel.sent",
    "elicitation.answered",
    "sampling.answered",
    "resources",
    "resource.read",
    "resource.subscribed",
    "resource.unsubscribed",
    "prompts",
    "prompt.got",
    "completion",
    "approvals",
    "calls",
    "server.logs",
}
# What a worker may send the socket meanwhile, for messages earlier in the batch.
NEWS = {"call.started", "call.progress", "call.log", "call.ended", "connection.status", "tools.changed", "server.log"}
HANDLERS = sorted(PlaygroundConsumer.handlers)
DAPHNE_MAX_MESSAGE = 1024 * 1024  # Daphne's default, which runportal keeps
# Every field any handler reads.
FIELDS = [
    "type", "ref", "server", "tool", "arguments", "refresh", "call", "elicitation", "action", "content",
    "sampling", "text", "model", "uri", "name", "prompt", "template", "argument", "value", "context",
    "approval", "answer", "request_id",
]  # fmt: skip
TIMEOUT = 3600 if SLOW else 300
fuzz = settings(max_examples=CASES, deadline=None, suppress_health_check=list(HealthCheck), database=None)

# Long strings are built by repetition: hypothesis drawing each of 300,000 characters would take minutes.
long_text = st.builds(lambda text, times: text * times, st.text(min_size=1, max_size=3), st.integers(1_000, 100_000))
leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20) | long_text
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def nested(depth: int, leaf: object) -> object:
    value = leaf
    for index in range(depth):
        value = [value] if index % 2 else {"k": value}
    return value


# Up to the cap and past it (the message and `arguments` are two levels of their own).
deep_values = st.builds(nested, st.integers(1, MAX_DEPTH + 20), leaves)
any_value = st.one_of(json_values, json_values, deep_values)  # deep a third of the time


ids = st.uuids().map(str) | st.text(max_size=70)
# A value each field's handler could take; the well-formed messages draw these, mostly.
PLAUSIBLE = {
    "ref": st.none() | st.text(max_size=10) | st.integers(),
    "tool": st.sampled_from(["echo", "add", "nope", "x" * 300]),
    "arguments": st.dictionaries(st.sampled_from(["message", "a", "b", "zzz"]), json_values, max_size=3),
    "refresh": st.booleans(),
    "call": ids,
    "elicitation": ids,
    "sampling": ids,
    "approval": ids,
    "action": st.sampled_from(["accept", "decline", "cancel", "approve"]),
    "content": json_values,
    "text": st.text(max_size=50),
    "model": st.text(max_size=20),
    "uri": st.sampled_from(["demo://readme", "demo://counter", "demo://nope", "demo://notes/a"]),
    "name": st.sampled_from(["hello", "review", "nope"]),
    "prompt": st.sampled_from(["review", "hello"]),
    "template": st.just("demo://notes/{name}"),
    "argument": st.sampled_from(["language", "name"]),
    "value": st.text(max_size=10),
    "context": st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=2),
    "answer": st.sampled_from(["allow_once", "deny", "maybe"]),
    # A few names, so the same intent comes twice; now and then one too long.
    "request_id": st.sampled_from(["i-1", "i-2", "i-3", "x" * 101]) | st.text(max_size=12),
}


@st.composite
def messages(draw, server_id: int):
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.text(min_size=1, max_size=50))  # not even JSON, usually
    if kind == 1:
        return json.dumps(draw(any_value))  # JSON, but not an object with a type
    if kind == 2:
        return draw(st.binary(max_size=64) | st.just(b'{"type": "list_approvals"}'))  # a binary frame
    if kind == 3:  # nesting far past the cap, as text (Python's encoder could not write it)
        depth = draw(st.integers(MAX_DEPTH, 3000))
        deep = "[" * depth + "]" * depth
        return f'{{"type": "call", "server": {server_id}, "tool": "echo", "arguments": {{"deep": {deep}}}}}'
    if kind <= 5:  # any fields, any values, any type (each handler's name among them)
        message = draw(st.dictionaries(st.sampled_from(FIELDS), any_value, max_size=8))
        message["type"] = draw(st.sampled_from(HANDLERS) | any_value)
        return message
    # Well-formed enough to reach a handler's end (and, for many, a worker); now and then one field
    # of any type at all, so each handler's own checks are met too.
    message = {
        "type": draw(st.sampled_from(HANDLERS + ["call"] * 3)),  # calls the most: they reach a worker
        "server": draw(st.sampled_from([server_id, server_id, server_id + 1000, -1])),
    }
    # Every field a handler may read (each ignores the others'), but one of complete's two targets.
    message.update((field, draw(PLAUSIBLE[field])) for field in sorted(PLAUSIBLE))
    del message[draw(st.sampled_from(["prompt", "template"]))]
    if draw(st.integers(0, 4)) == 0:
        message[draw(st.sampled_from(FIELDS[1:]))] = draw(any_value)
    return message


def frame(message) -> str | bytes:
    return message if isinstance(message, (str, bytes)) else json.dumps(message)


def over_daphnes_limit(message) -> bool:
    data = frame(message)
    return len(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass")) > DAPHNE_MAX_MESSAGE


async def answered(ws, message) -> None:
    """Send `message` and read until its answer; worker news of earlier messages may come first."""
    if isinstance(ws, DaphneSocket) and over_daphnes_limit(message):
        # Daphne's own limit, before the portal sees anything: the connection is dropped, no close
        # frame (docs/websocket-protocol.md), maybe while the frame is still going out. The case goes
        # on with a new socket.
        with pytest.raises(ConnectionClosed) as closed:
            await ws.send(frame(message))
            while True:  # news of earlier messages, already on its way, may come before the drop
                assert (await ws.receive(timeout=30))["type"] not in ANSWERS
        assert closed.value.rcvd is None
        await ws.reopen()
        return
    if isinstance(message, bytes) and isinstance(ws, Playground):
        # As Daphne hands a binary frame over (send_to() refuses an empty one).
        await ws.communicator.send_input({"type": "websocket.receive", "bytes": message})
    else:
        await ws.send(frame(message))
    while (reply := await ws.receive(timeout=30))["type"] not in ANSWERS:
        assert reply["type"] in NEWS or reply["type"].startswith("resource."), reply
    assert reply["type"] != "error" or reply.get("kind") != "internal", (message, reply)


async def still_open(ws) -> None:
    await ws.send(json.dumps({"type": "list_approvals", "ref": "still-open"}))
    while (reply := await ws.receive(timeout=30)).get("ref") != "still-open":
        pass
    assert reply["type"] == "approvals"


def run_cases(count: int, batch_strategy, open_socket) -> list[int]:
    ran = []

    @settings(fuzz, max_examples=count)
    @given(batch=batch_strategy)
    def case(batch):
        ran.append(len(batch))
        if not django_settings.EMBEDDED:
            # A fresh channels_redis layer per case, as conftest does per test: each case is a new event
            # loop, and a lock the layer took in an earlier loop cannot be awaited in this one.
            channel_layers.backends.clear()

        async def scenario():
            async with open_socket() as ws:
                for message in batch:
                    await answered(ws, message)
                await still_open(ws)

        asyncio.run(scenario())

    case()
    return ran


def no_call_left_running() -> bool:
    deadline = time.monotonic() + 60
    while ToolCall.objects.exclude(status__in=FINISHED).exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    return not ToolCall.objects.exclude(status__in=FINISHED).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
@pytest.mark.timeout(TIMEOUT)
def test_websocket_messages_always_get_an_answer_and_no_call_is_left_running(alice, demo_server):
    cookie = session_cookie(alice)
    ran = run_cases(CASES, st.lists(messages(demo_server.pk), min_size=1, max_size=4), lambda: Playground(cookie))
    assert len(ran) >= CASES  # the figure docs/security.md states
    assert no_call_left_running()


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(TIMEOUT)
def test_through_daphne_messages_always_get_an_answer(alice, demo_server, daphne_portal):
    # The same messages, through Daphne's own frame handling (text and binary frames, sizes, UTF-8).
    cookie = session_cookie(alice)
    strategy = st.lists(messages(demo_server.pk), min_size=1, max_size=4)
    ran = run_cases(DAPHNE_CASES, strategy, lambda: DaphneSocket(daphne_portal, cookie))
    assert len(ran) >= DAPHNE_CASES
    assert no_call_left_running()


form_fields = st.fixed_dictionaries(
    {},
    optional={
        "team": st.one_of(st.text(max_size=5), st.integers(-5, 10_000).map(str)),
        "name": st.text(max_size=80),
        "description": st.text(max_size=400),
        "transport": st.sampled_from(["stdio", "http", "sse", "", "websocket", "\x00"]),
        "command": st.text(max_size=60),
        "args": st.text(max_size=200),
        "env": st.text(max_size=200),
        "cwd": st.text(max_size=60),
        "url": st.one_of(
            st.text(max_size=80),
            st.sampled_from(["http://x", "https://example.com/mcp", "javascript:alert(1)", "http://[::1"]),
        ),
        "headers": st.text(max_size=200),
        "request_timeout": st.one_of(st.text(max_size=8), st.floats(allow_nan=True, allow_infinity=True).map(str)),
        "enabled": st.sampled_from(["on", "", "off"]),
    },
)


@pytest.mark.django_db
@pytest.mark.timeout(TIMEOUT)
def test_the_registration_form_never_errors(alice):
    client = Client()
    client.force_login(alice)

    ran = []

    @settings(fuzz, max_examples=FORM_CASES)
    @given(data=form_fields)
    def case(data):
        ran.append(1)
        clean = {k: v.replace("\x00", "") for k, v in data.items()}  # the test client itself cannot send NUL
        response = client.post("/servers/add/", clean)
        assert response.status_code in (200, 302), response.status_code
        if response.status_code == 302:
            Server.objects.all().delete()

    case()
    assert len(ran) >= FORM_CASES


@pytest.mark.django_db(transaction=True)
def test_nan_and_infinity_are_refused_as_not_json(alice, demo_server):
    # Python's json reads them; no database stores them. Found by the 5,000-case run (an IntegrityError).
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            replies = []
            for constant in ("Infinity", "-Infinity", "NaN"):
                text = '{"type": "call", "server": %d, "tool": "echo", "arguments": {"message": %s}}'
                await ws.send(text % (demo_server.pk, constant))
                replies.append(await ws.receive())
            return replies

    replies = asyncio.run(scenario())
    assert [r["type"] for r in replies] == ["error"] * 3
    assert all(r["message"] == "The message is not valid JSON." for r in replies)
    assert not ToolCall.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_nul_character_is_refused(alice, demo_server):
    # PostgreSQL stores no U+0000 in JSON. Found by the fuzz in the distributed mode (a DataError).
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            replies = []
            for arguments in ({"message": "a\x00b"}, {"\x00": "key"}, {"message": ["x", {"y": "\x00"}]}):
                await ws.send({"type": "call", "server": demo_server.pk, "tool": "echo", "arguments": arguments})
                replies.append(await ws.receive())
            return replies

    replies = asyncio.run(scenario())
    assert [r["type"] for r in replies] == ["error"] * 3
    assert all("NUL" in r["message"] for r in replies)
    assert not ToolCall.objects.exists()
