"""A page that subscribes to resource after resource, to hold a worker's memory and a server's attention:
one page holds at most MAX_SUBSCRIPTIONS (50) at once (sessions/consumers.py)."""

from __future__ import annotations

import asyncio

import pytest

from sessions.messages import MAX_SUBSCRIPTIONS
from tests.ws import Playground, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def uri(number: int) -> str:
    return f"demo://greeting/visitor{number}"


async def answers(ws: Playground, refs: list[str], timeout: float = 60) -> list[dict]:
    """The answer (resource.subscribed or error) to each of these messages, whatever order they came in."""
    kinds = {"resource.subscribed", "error"}
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        found = {e.get("ref"): e for e in ws.seen if e.get("type") in kinds}
        if all(ref in found for ref in refs):
            return [found[ref] for ref in refs]
        await ws.receive(timeout=max(0.1, deadline - asyncio.get_running_loop().time()))


def test_a_page_holds_at_most_fifty_subscriptions(alice, demo_server):
    assert MAX_SUBSCRIPTIONS == 50  # the figure docs/security.md states
    cookie = session_cookie(alice)
    server = demo_server.pk

    def subscribe(number: int, ref: str) -> dict:
        return {"type": "subscribe_resource", "ref": ref, "server": server, "uri": uri(number)}

    async def scenario():
        async with Playground(cookie) as ws:
            for number in range(MAX_SUBSCRIPTIONS):
                await ws.send(subscribe(number, f"s{number}"))
            held = await answers(ws, [f"s{number}" for number in range(MAX_SUBSCRIPTIONS)])
            await ws.send(subscribe(MAX_SUBSCRIPTIONS, "one-too-many"))
            (refused,) = await answers(ws, ["one-too-many"])
            await ws.send(subscribe(0, "again"))  # one it holds already: not a new one
            (again,) = await answers(ws, ["again"])
            await ws.send({"type": "unsubscribe_resource", "ref": "u0", "server": server, "uri": uri(0)})
            await ws.until("resource.unsubscribed", ref="u0")
            await ws.send(subscribe(MAX_SUBSCRIPTIONS, "room-again"))  # one given back makes room
            (room,) = await answers(ws, ["room-again"])
            return held, refused, again, room

    held, refused, again, room = asyncio.run(scenario())
    assert [e["type"] for e in held] == ["resource.subscribed"] * MAX_SUBSCRIPTIONS
    assert all("error" not in e for e in held), [e for e in held if "error" in e][:3]
    assert refused["type"] == "error" and refused["message"] == "A page may hold at most 50 subscriptions."
    assert again["type"] == "resource.subscribed"
    assert room["type"] == "resource.subscribed" and "error" not in room
