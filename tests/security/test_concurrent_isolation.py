"""Isolation under concurrency: five people in two teams use three servers at once (stdio and
Streamable HTTP; in the distributed mode through the worker processes). Every result, progress
event, log line, approval and elicitation reaches its owner's socket only, and a server outside a
person's team is neither listed nor reported to them."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest
from django.conf import settings as django_settings

from servers.models import Server
from sessions.models import ToolCall
from tests.conftest import DEMO_ARGS, DEMO_COMMAND
from tests.test_worker_affinity import two_workers  # noqa: F401 - a fixture, used through `workers`
from tests.ws import Playground, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

PEOPLE = {"alice": "Acme", "bob": "Acme", "dave": "Acme", "carol": "Globex", "erin": "Globex"}


async def use_everything(name: str, cookie: str, servers: list[int]) -> tuple[list[dict], set[str], list[str]]:
    """Every kind of conversation a call can have, on each server this person's team has."""
    async with Playground(cookie) as ws:
        mine: set[str] = set()
        texts: list[str] = []
        for server in servers:
            echoed = await ws.call(server, "echo", {"message": f"{name}@{server}"}, timeout=60)
            counted = await ws.call(server, "count", {"steps": 3, "delay": 0.01}, timeout=60)
            noted = await ws.call(server, "write_note", {"text": f"note of {name}"}, timeout=60, approve="allow_once")
            await ws.send(
                {"type": "call", "ref": f"ask{server}", "server": server, "tool": "ask", "arguments": {"topic": name}}
            )
            asking = (await ws.until("call.accepted", ref=f"ask{server}", timeout=60))["call"]
            asked = await ws.until("elicitation.requested", call=asking, timeout=60)
            content = {"name": name, "email": f"{name}@example.com"}
            await ws.send(
                {
                    "type": "answer_elicitation",
                    "elicitation": asked["elicitation"],
                    "action": "accept",
                    "content": content,
                }
            )
            answered = await ws.until("call.ended", call=asking, timeout=60)
            for ended in (echoed, counted, noted, answered):
                assert ended["status"] == "succeeded", ended
                mine.add(ended["call"])
                texts.append(ended["result"]["content"][0]["text"])
        return ws.seen, mine, texts


@pytest.fixture
def workers(request):
    """In the distributed mode, two worker processes of their own serve these calls (the embedded mode
    has one process by design)."""
    if django_settings.EMBEDDED:
        return {}
    return request.getfixturevalue("two_workers")


def test_every_event_reaches_only_its_owner(make_user, demo_http_url, workers):
    people = {
        name: make_user(name, team=team, role="admin" if name in ("alice", "carol") else "member")
        for name, team in PEOPLE.items()
    }
    acme, globex = people["alice"].memberships.get().team, people["carol"].memberships.get().team
    servers = {
        acme.pk: [
            Server.objects.create(
                team=acme, name="acme-stdio", transport="stdio", command=DEMO_COMMAND, args=DEMO_ARGS
            ).pk,
            Server.objects.create(team=acme, name="acme-http", transport="http", url=demo_http_url).pk,
        ],
        globex.pk: [
            Server.objects.create(
                team=globex, name="globex-stdio", transport="stdio", command=DEMO_COMMAND, args=DEMO_ARGS
            ).pk,
        ],
    }
    cookies = {name: session_cookie(user) for name, user in people.items()}
    visible = {name: servers[user.memberships.get().team_id] for name, user in people.items()}

    async def everyone():
        return await asyncio.gather(*(use_everything(name, cookies[name], visible[name]) for name in people))

    outcomes = dict(zip(people, asyncio.run(everyone()), strict=True))

    for name, (seen, mine, texts) in outcomes.items():
        team_servers = set(visible[name])
        # Every kind of event was there to leak.
        assert {"call.progress", "approval.requested", "elicitation.requested", "call.ended"} <= {
            e["type"] for e in seen
        }
        # Their own results, and nobody else's words anywhere in what their socket received.
        assert all(f"{name}@{server}" in " ".join(texts) for server in team_servers), texts
        frames = json.dumps(seen)
        for other in people:
            if other != name:
                assert f'"{other}@' not in frames and f"note of {other}" not in frames, (name, other)
                assert f"{other}@example.com" not in frames, (name, other)
        for event in seen:
            if "call" in event and event.get("type") != "error":
                assert event["call"] in mine, (name, event)
            if "server" in event and event.get("server") is not None:
                assert event["server"] in team_servers, (name, event)
        # The records agree: each call belongs to the person who started it.
        assert set(ToolCall.objects.filter(user=people[name]).values_list("id", flat=True)) == {
            uuid.UUID(call) for call in mine
        }
    assert ToolCall.objects.count() == sum(len(mine) for _, mine, _ in outcomes.values())
    if workers:
        # Every call ran in one of the two worker processes started for this test.
        assert set(ToolCall.objects.values_list("worker", flat=True)) <= set(workers)


def test_one_person_in_two_teams_keeps_the_teams_apart(make_user, bob, carol):
    """Dana is in Acme and in Globex, and both teams have a server named demo. Her own rule made in Acme
    stays in Acme, the playground groups her servers by team, people of one team never reach the other's
    server, and leaving Acme ends her use of Acme's server only."""
    from servers.actions import do_add_rule
    from servers.models import Membership, Team
    from servers.team_actions import do_leave_team

    dana = make_user("dana", team="Acme")
    acme, globex = Team.objects.get(name="Acme"), Team.objects.get(name="Globex")
    Membership.objects.create(team=globex, user=dana, role="member")
    servers = {
        team.name: Server.objects.create(
            team=team, name="demo", transport="stdio", command=DEMO_COMMAND, args=DEMO_ARGS
        )
        for team in (acme, globex)
    }
    do_add_rule(acme, dana, "mcp__demo__echo", "deny", dana)
    cookies = {user.username: session_cookie(user) for user in (dana, bob, carol)}

    async def call(name: str, team: str) -> dict:
        async with Playground(cookies[name]) as ws:
            return await ws.call(servers[team].pk, "echo", {"message": f"{name} in {team}"}, timeout=60)

    async def at_once(*pairs) -> list[dict]:
        return await asyncio.gather(*(call(name, team) for name, team in pairs))

    dana_acme, dana_globex, bob_globex, carol_acme, bob_acme = asyncio.run(
        at_once(("dana", "Acme"), ("dana", "Globex"), ("bob", "Globex"), ("carol", "Acme"), ("bob", "Acme"))
    )
    assert (dana_acme["status"], dana_acme["error_kind"]) == ("rejected", "denied")  # her Acme rule
    assert dana_globex["status"] == "succeeded" and dana_globex["result"]["content"][0]["text"] == "dana in Globex"
    assert bob_acme["status"] == "succeeded"
    for outsider in (bob_globex, carol_acme):
        assert (outsider["status"], outsider["error_kind"]) == ("rejected", "unknown_server"), outsider

    from django.test import Client

    client = Client()
    client.force_login(dana)
    page = client.get("/playground/").content.decode()
    assert '<optgroup label="Acme">' in page and '<optgroup label="Globex">' in page

    do_leave_team(dana, acme)
    left_acme, still_globex = asyncio.run(at_once(("dana", "Acme"), ("dana", "Globex")))
    assert left_acme["error_kind"] == "unknown_server"
    assert still_globex["status"] == "succeeded"
