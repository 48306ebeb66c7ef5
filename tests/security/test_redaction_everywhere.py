"""Attack: a hostile server echoes the member's secret back in every channel it has (progress, logs,
elicitation and sampling requests, tool names and descriptions, resources, prompts, instructions,
errors, stderr). None of it may reach a browser or a stored row; one member's secret never reaches
another member through the tool list the team shares."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from servers.models import Server
from tests.conftest import ROOT
from tests.helpers import logged_in
from tests.test_secrets_never_leak import database_text
from tests.ws import Playground, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

ALICE_SECRET = "alice-Secret-7f3a9c2e1b"
BOB_SECRET = "bob-Secret-44d1e0a9c7"
REFERENCE = "${secret:KEY}"


@pytest.fixture
def hostile(alice, tmp_path):
    return Server.objects.create(
        team=alice.memberships.get().team,
        name="hostile",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.servers.hostile_server", "--memory", str(tmp_path / "memory")],
        env={"HOSTILE_SECRET": REFERENCE},
        cwd=str(ROOT),
        protocol="legacy",
        request_timeout=15,
        created_by=alice,
    )


def set_key(user, server, value: str) -> None:
    response = logged_in(user).post(f"/credentials/{server.pk}/secret/", {"name": "KEY", "value": value})
    assert response.status_code in (200, 302)


async def use_every_channel(ws: Playground, server_id: int, admin: bool) -> dict[str, dict]:
    """What a person does: list the tools, call the tool that talks back (answering its form and its
    sampling request), call the failing tools, browse resources and prompts, test the connection."""
    seen: dict[str, dict] = {}
    await ws.send({"type": "list_tools", "server": server_id})
    seen["tools"] = await ws.until("tools", server=server_id)

    accepted = await ws.start(server_id, "echo_everything", {"note": "hi"})
    call = accepted["call"]
    form = await ws.until("elicitation.requested", call=call)
    seen["form"] = form
    await ws.send({"type": "answer_elicitation", "elicitation": form["elicitation"], "action": "accept", "content": {}})
    sampling = await ws.until("sampling.requested", call=call)
    seen["sampling"] = sampling
    await ws.send({"type": "answer_sampling", "sampling": sampling["sampling"], "action": "approve", "text": "ok"})
    seen["echo"] = await ws.until("call.ended", call=call)
    seen["fail"] = await ws.call(server_id, "fail")

    await ws.send({"type": "list_resources", "server": server_id, "ref": "res"})
    seen["resources"] = await ws.until("resources", ref="res")
    await ws.send({"type": "list_prompts", "server": server_id, "ref": "pro"})
    seen["prompts"] = await ws.until("prompts", ref="pro")
    if admin:
        await ws.send({"type": "test_connection", "server": server_id})
        seen["test"] = await ws.until("connection.tested", server=server_id)
    seen["crash"] = await ws.call(server_id, "crash")
    return seen


def test_a_server_echoing_the_secret_everywhere_shows_only_its_reference(alice, hostile):
    set_key(alice, hostile, ALICE_SECRET)
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            seen = await use_every_channel(ws, hostile.pk, admin=True)
            # The crash's connection status comes from the pool, before or after the call's end.
            failed = {"type": "connection.status", "server": hostile.pk, "status": "failed"}
            if not any(failed.items() <= event.items() for event in ws.seen):
                await ws.until("connection.status", server=hostile.pk, status="failed")
            return seen, ws.seen

    seen, frames = asyncio.run(scenario())

    # Every channel did carry the echo (as its reference), so the checks below check something.
    assert seen["echo"]["status"] == "succeeded", seen["echo"]
    kinds = {event["type"] for event in frames if REFERENCE in json.dumps(event)}
    assert {"call.progress", "call.log", "elicitation.requested", "sampling.requested", "call.ended"} <= kinds
    assert {"tools", "resources", "prompts", "connection.tested"} <= kinds, kinds
    names = {tool["name"] for tool in seen["tools"]["tools"]}
    assert f"leak_{REFERENCE}" in names
    assert REFERENCE in seen["form"]["message"] and REFERENCE in json.dumps(seen["form"]["schema"])
    assert REFERENCE in seen["test"]["instructions"] and REFERENCE in seen["test"]["server_name"]
    assert seen["fail"]["status"] == "failed" and REFERENCE in seen["fail"]["error"]
    assert seen["crash"]["status"] == "failed" and REFERENCE in json.dumps(seen["crash"]["details"])

    # ... and the secret itself is nowhere a browser or the database can see.
    assert ALICE_SECRET not in json.dumps(frames)
    hostile.refresh_from_db()
    assert ALICE_SECRET not in json.dumps([hostile.tools, hostile.last_test])
    assert ALICE_SECRET not in database_text()  # calls, audit, elicitations, sampling, connection status
    # The raw JSON-RPC view captured the echoing messages themselves, through the same scrubber.
    from sessions.models import ToolCall

    raw = json.dumps(ToolCall.objects.get(pk=seen["echo"]["call"]).details["exchange"])
    assert REFERENCE in raw and ALICE_SECRET not in raw
    for page in ("/calls/", f"/calls/{seen['echo']['call']}/", f"/servers/{hostile.pk}/", "/playground/"):
        assert ALICE_SECRET not in logged_in(alice).get(page).content.decode()


def test_a_server_that_remembers_one_members_secret_cannot_show_it_to_another(alice, bob, hostile):
    """The server keeps what Alice's connection was given and lists it in Bob's tool descriptions
    (as a remote server shared by the team could): the team-wide tool list never carries it."""
    set_key(alice, hostile, ALICE_SECRET)
    set_key(bob, hostile, BOB_SECRET)
    alice_cookie, bob_cookie = session_cookie(alice), session_cookie(bob)

    async def list_tools(cookie):
        async with Playground(cookie) as ws:
            await ws.send({"type": "list_tools", "server": hostile.pk, "refresh": True})
            await ws.until("tools", server=hostile.pk)
            return ws.seen

    asyncio.run(list_tools(alice_cookie))
    bob_frames = asyncio.run(list_tools(bob_cookie))

    hostile.refresh_from_db()
    stored = json.dumps(hostile.tools)
    description = hostile.tool("echo_everything")["description"]
    # Bob's connection was told both values; what the team sees names them only by reference.
    assert description == f"Echoes {REFERENCE} and {REFERENCE} in every channel.", description
    for secret in (ALICE_SECRET, BOB_SECRET):
        assert secret not in stored
        assert secret not in json.dumps(bob_frames)
        assert secret not in logged_in(bob).get(f"/servers/{hostile.pk}/").content.decode()
