"""What a membership change does at once, through the playground's WebSocket and a real worker: an
auditor cannot call, a removed member's connection closes and their waiting approval is withdrawn,
a demoted admin's open socket loses what admins may do."""

from __future__ import annotations

import asyncio

import pytest
from channels.db import database_sync_to_async
from django.conf import settings

from sessions.models import Approval, ConnectionStatus, ToolCall
from tests.helpers import eventually, live_keys
from tests.teams import TeamPages, membership
from tests.ws import Playground, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def _connected(server, user) -> bool:
    row = ConnectionStatus.objects.filter(server=server, owner=f"user:{user.pk}").first()
    return row is not None and row.status == "connected"


def test_an_auditor_cannot_call_list_or_read_through_the_websocket(alice, bob, demo_server):
    TeamPages(alice).set_role(membership(bob, "Acme"), "auditor")
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(demo_server.pk, "echo", {"message": "hi"})
            refusals = []
            for message in (
                {"type": "list_tools", "server": demo_server.pk},
                {"type": "list_resources", "server": demo_server.pk},
                {"type": "list_prompts", "server": demo_server.pk},
                {"type": "test_connection", "server": demo_server.pk},
            ):
                await ws.send({**message, "ref": message["type"]})
                refusals.append(await ws.until("error", ref=message["type"]))
            return ended, refusals

    ended, refusals = asyncio.run(scenario())
    assert (ended["status"], ended["error_kind"]) == ("rejected", "role_refused"), ended
    assert "auditor" in ended["error"]
    assert [r.get("kind") for r in refusals[:3]] == ["role_refused"] * 3
    assert "admins" in refusals[3]["message"]
    assert ToolCall.objects.get(pk=ended["call"]).started_at is None  # no server was touched
    # The playground offers an auditor no server to call; the team's call records are theirs to read.
    client = TeamPages(bob).client
    assert "No servers" in client.get("/playground/").content.decode()
    assert client.get(f"/calls/{ended['call']}/").status_code == 200


def test_a_removed_member_loses_their_connection_approvals_and_the_teams_servers_at_once(alice, bob, demo_server):
    cookie = session_cookie(bob)
    remove = database_sync_to_async(lambda: TeamPages(alice).remove(membership(bob, "Acme")))

    async def scenario():
        async with Playground(cookie) as ws:
            first = await ws.call(demo_server.pk, "echo", {"message": "before"})
            accepted = await ws.start(demo_server.pk, "write_note", {"text": "waiting"})
            requested = await ws.until("approval.requested", call=accepted["call"])
            await database_sync_to_async(eventually)(lambda: _connected(demo_server, bob))
            await remove()
            waiting_ended = await ws.until("call.ended", call=accepted["call"])
            withdrawn = await ws.until("approval.ended", approval=requested["approval"])
            after = await ws.call(demo_server.pk, "echo", {"message": "after"})
            await ws.send({"type": "list_tools", "server": demo_server.pk, "ref": "tools"})
            listed = await ws.until("error", ref="tools")
            return first, withdrawn, waiting_ended, after, listed

    first, withdrawn, waiting_ended, after, listed = asyncio.run(scenario())
    assert first["status"] == "succeeded", first
    assert withdrawn["state"] == "declined"
    assert (waiting_ended["status"], waiting_ended["error_kind"]) == ("rejected", "membership_ended")
    assert Approval.objects.get(pk=withdrawn["approval"]).state == "declined"
    assert (after["status"], after["error_kind"]) == ("rejected", "unknown_server")
    assert listed["kind"] == "unknown_server"
    # The worker closed the connection that served bob (closing removes its status row).
    eventually(lambda: not ConnectionStatus.objects.filter(server=demo_server, owner=f"user:{bob.pk}").exists(), 10)
    if settings.EMBEDDED:
        assert not live_keys(demo_server.pk, f"user:{bob.pk}"), "the removed member's connection stayed open"
    # Their records stay.
    assert ToolCall.objects.filter(user=bob).count() == 3


def test_other_members_connections_stay_open_when_one_is_removed(alice, bob, make_user, demo_server):
    dana = make_user("dana")
    cookies = {"bob": session_cookie(bob), "dana": session_cookie(dana)}

    async def call_as(name):
        async with Playground(cookies[name]) as ws:
            return await ws.call(demo_server.pk, "echo", {"message": name})

    async def both():
        return await asyncio.gather(call_as("bob"), call_as("dana"))

    assert [e["status"] for e in asyncio.run(both())] == ["succeeded", "succeeded"]
    eventually(lambda: _connected(demo_server, bob) and _connected(demo_server, dana))
    TeamPages(alice).remove(membership(bob, "Acme"))
    eventually(lambda: not ConnectionStatus.objects.filter(server=demo_server, owner=f"user:{bob.pk}").exists(), 10)
    assert _connected(demo_server, dana)


def test_a_demoted_admins_open_socket_loses_admin_rights_at_once(alice, bob, demo_server):
    pages = TeamPages(alice)
    pages.set_role(membership(bob, "Acme"), "admin")
    cookie = session_cookie(bob)
    demote = database_sync_to_async(lambda: TeamPages(bob).set_role(membership(bob, "Acme"), "member"))

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send({"type": "test_connection", "server": demo_server.pk, "ref": "as-admin"})
            await asyncio.sleep(0.5)
            before = [e for e in ws.seen if e.get("ref") == "as-admin" and e["type"] == "error"]
            await demote()
            await ws.send({"type": "test_connection", "server": demo_server.pk, "ref": "as-member"})
            return before, await ws.until("error", ref="as-member")

    before, after = asyncio.run(scenario())
    assert before == [] and "Only the team's admins" in after["message"]


def test_a_removed_members_open_form_is_cancelled(alice, bob, demo_server):
    from sessions.models import Elicitation

    cookie = session_cookie(bob)
    remove = database_sync_to_async(lambda: TeamPages(alice).remove(membership(bob, "Acme")))

    async def scenario():
        async with Playground(cookie) as ws:
            accepted = await ws.start(demo_server.pk, "ask", {"topic": "leaving"})
            asked = await ws.until("elicitation.requested", call=accepted["call"])
            await remove()
            return asked, await ws.until("call.ended", call=accepted["call"])

    asked, ended = asyncio.run(scenario())
    assert Elicitation.objects.get(pk=asked["elicitation"]).state == "cancel"
    assert ended["status"] != "running"
    # Answering it afterwards changes nothing: the form is closed.
    assert Elicitation.objects.get(pk=asked["elicitation"]).response is None


def test_a_removed_members_socket_stops_receiving_the_teams_events(alice, bob, demo_server):
    from servers.credentials.actions import do_set_secret

    demo_server.shared = True  # one session for the whole team: its events go to every member
    demo_server.save()
    cookies = {"alice": session_cookie(alice), "bob": session_cookie(bob)}
    remove = database_sync_to_async(lambda: TeamPages(alice).remove(membership(bob, "Acme")))
    # A new team value changes the shared connection's credentials: the workers close it.
    change = database_sync_to_async(lambda: do_set_secret(demo_server, "TOKEN", "v2", by=alice, team=demo_server.team))

    async def scenario():
        async with Playground(cookies["bob"]) as bob_ws, Playground(cookies["alice"]) as alice_ws:
            assert (await alice_ws.call(demo_server.pk, "echo", {"message": "1"}))["status"] == "succeeded"
            before = await bob_ws.until("connection.status", server=demo_server.pk, status="connected")
            await remove()
            await change()
            await alice_ws.until("connection.status", server=demo_server.pk, status="closed", timeout=15)
            assert (await alice_ws.call(demo_server.pk, "echo", {"message": "2"}))["status"] == "succeeded"
            closed_at = len(alice_ws.seen)
            # Whatever bob's socket received since, read it all (receive_nothing leaves the socket open).
            while not await bob_ws.communicator.receive_nothing(timeout=1):
                await bob_ws.receive()
            reopened = [e for e in alice_ws.seen[:closed_at] if e["type"] == "connection.status"][-1]
            after = [e for e in bob_ws.seen[bob_ws.seen.index(before) + 1 :] if e.get("server") == demo_server.pk]
            return before, reopened, after

    before, reopened, after = asyncio.run(scenario())
    # The team's connection opened again and told its members (alice), not bob.
    assert before["status"] == "connected" and reopened["status"] in ("pending", "connected")
    assert after == [], after
