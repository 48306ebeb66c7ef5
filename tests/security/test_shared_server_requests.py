"""The attack: on a shared server in the handshake era, Bob calls a tool while Alice's call is about to
ask her something. The server's requests and log messages name no call; neither may reach the other
member's socket."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.ws import Playground, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def test_bob_never_sees_the_form_alices_call_asks_for_on_a_shared_server(alice, bob, demo_server):
    demo_server.shared, demo_server.protocol, demo_server.request_timeout = True, "legacy", 60
    demo_server.save()
    alice_cookie, bob_cookie = session_cookie(alice), session_cookie(bob)
    server = demo_server.pk

    async def scenario():
        async with Playground(alice_cookie) as a, Playground(bob_cookie) as b:
            warm = await b.call(server, "echo", {"message": "the shared session is open"})
            assert warm["status"] == "succeeded", warm
            # Alice's call asks after a second; Bob's call, started after hers, is in flight by then
            # (or waiting its turn), and it writes a log line.
            asking = (await a.start(server, "ask_later", {"topic": "the Acme merger", "seconds": 1}))["call"]
            await a.until("call.started", call=asking)
            sleeping = (await b.start(server, "sleep", {"seconds": 2}))["call"]
            asked = await a.until("elicitation.requested", call=asking, timeout=30)
            content = {"name": "Alice", "email": "alice@example.com"}
            await a.send(
                {
                    "type": "answer_elicitation",
                    "elicitation": asked["elicitation"],
                    "action": "accept",
                    "content": content,
                }
            )
            alices = await a.until("call.ended", call=asking, timeout=60)
            bobs = await b.until("call.ended", call=sleeping, timeout=60)
            return asked, alices, bobs, a.seen, b.seen

    asked, alices, bobs, alice_saw, bob_saw = asyncio.run(scenario())
    assert "the Acme merger" in asked["message"]
    assert alices["status"] == "succeeded", alices
    assert alices["result"]["content"][0]["text"] == "will contact Alice <alice@example.com> about the Acme merger"
    # Bob's call is unaffected, and nothing of Alice's conversation reached him.
    assert bobs["status"] == "succeeded", bobs
    assert bobs["result"]["content"][0]["text"] == "slept 2.0 s"
    assert not [e for e in bob_saw if e["type"].startswith("elicitation.")], bob_saw
    assert "Acme merger" not in json.dumps(bob_saw)
    assert {e["data"] for e in bob_saw if e["type"] == "call.log"} == {"sleeping 2 s"}
    # Nor did Bob's log line reach Alice: every call event on her socket is her own call's.
    assert {e["call"] for e in alice_saw if "call" in e} == {alices["call"]}
    assert "sleeping" not in json.dumps(alice_saw)
