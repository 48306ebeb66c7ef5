"""Per (server, user) connection status, shared sessions, remembered eras and tools.changed, through a real worker."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from django.test import Client

from servers.models import Server
from sessions.models import ConnectionStatus
from tests.conftest import DEMO_ARGS, DEMO_COMMAND, ROOT, ServerProcess, server_processes
from tests.helpers import eventually
from tests.ws import Playground, run, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


async def seen_or_next(ws: Playground, type_: str, **match):
    """An event already received while waiting for another one, or the next one that matches."""
    for event in ws.seen:
        if event.get("type") == type_ and all(event.get(k) == v for k, v in match.items()):
            return event
    return await ws.until(type_, **match)


def test_a_call_leaves_the_connection_status_and_tells_the_browser(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(demo_server.pk, "echo", {"message": "hi"})
            status = await seen_or_next(ws, "connection.status", server=demo_server.pk, status="connected")
            return ended, status

    ended, status = run(scenario())
    assert ended["status"] == "succeeded" and status["error"] == ""
    row = ConnectionStatus.objects.get(server=demo_server)
    assert (row.owner, row.status) == (f"user:{alice.pk}", "connected") and row.worker

    client = Client()
    client.force_login(alice)
    page = client.get("/servers/").content.decode()
    assert f'data-connection="{demo_server.pk}"><span class="badge connection-connected"' in page


def test_the_era_a_server_answered_is_remembered_on_the_server(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "echo", {"message": "hi"})

    assert run(scenario())["status"] == "succeeded"
    eventually(lambda: Server.objects.get(pk=demo_server.pk).negotiated)
    demo_server.refresh_from_db()
    assert demo_server.negotiated["era"] == "modern"
    assert demo_server.negotiated["fingerprint"] == demo_server.to_config().fingerprint()
    assert demo_server.to_config().connect_mode()[0] == "2026-07-28"  # no probe next time


def test_a_server_that_wants_a_token_shows_needs_auth(alice):
    server_process = ServerProcess("http", "--require-header", "X-Token=s3cret").start()
    try:
        server = Server.objects.create(
            team=alice.memberships.get().team,
            name="guarded",
            transport="http",
            url=f"http://127.0.0.1:{server_process.port}/mcp",
            created_by=alice,
        )
        cookie = session_cookie(alice)

        async def scenario():
            async with Playground(cookie) as ws:
                return await ws.call(server.pk, "echo", {"message": "hi"})

        ended = run(scenario())
    finally:
        server_process.stop()
    assert (ended["status"], ended["error_kind"]) == ("failed", "needs_auth")
    eventually(lambda: ConnectionStatus.objects.filter(server=server, status="needs-auth").exists())


def test_each_user_has_a_session_of_their_own_unless_the_server_is_shared(alice, bob, demo_server):
    alice_cookie, bob_cookie = session_cookie(alice), session_cookie(bob)

    async def server_pids():
        # Which server process answered: in the sandbox every one is PID 2 of its own namespace,
        # so the demo names itself by a number of its own.
        pids = []
        for cookie in (alice_cookie, bob_cookie):
            async with Playground(cookie) as ws:
                # spawn is not read-only, so the default policy asks first.
                ended = await ws.call(demo_server.pk, "spawn", {}, approve="allow_once")
                assert ended["status"] == "succeeded", ended
                pids.append(ended["result"]["structuredContent"]["server_process"])
        return pids

    own = run(server_pids())
    assert own[0] != own[1]
    demo_server.shared = True
    demo_server.save()
    shared = run(server_pids())
    assert shared[0] == shared[1] and shared[0] not in own
    team = alice.memberships.get().team
    eventually(
        lambda: ConnectionStatus.objects.filter(
            server=demo_server, owner=f"team:{team.pk}", status="connected"
        ).exists()
    )


def test_a_changed_tool_list_reaches_the_open_playground(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.call(demo_server.pk, "toggle_tool", approve="allow_once")  # not read-only: asks first
            changed = await seen_or_next(ws, "tools.changed", server=demo_server.pk)
            await ws.send({"type": "list_tools", "server": demo_server.pk, "refresh": True})
            tools = await ws.until("tools", server=demo_server.pk)
            return changed, tools

    changed, tools = run(scenario())
    assert changed == {"type": "tools.changed", "server": demo_server.pk}
    extra = next(t for t in tools["tools"] if t["name"] == "extra")
    assert extra["full_name"] == "mcp__demo__extra" and extra["summary"]


def test_a_stdio_server_that_exits_while_idle_is_noticed_at_once_and_the_next_call_reconnects(alice):
    token = f"idle-{uuid.uuid4().hex}"
    server = Server.objects.create(
        team=alice.memberships.get().team,
        name="demo",
        transport="stdio",
        command=DEMO_COMMAND,
        args=[*DEMO_ARGS, "stdio", "--host", token],
        cwd=str(ROOT),
        request_timeout=10,
        created_by=alice,
    )
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            first = await ws.call(server.pk, "echo", {"message": "one"})
            await seen_or_next(ws, "connection.status", server=server.pk, status="connected")
            (pid,) = server_processes(token)
            os.kill(pid, signal.SIGKILL)
            # No call is made: the connection's end is news by itself.
            lost = await ws.until("connection.status", server=server.pk, timeout=10)
            second = await ws.call(server.pk, "echo", {"message": "two"})
            return first, pid, lost, second

    first, killed, lost, second = run(scenario())
    assert first["status"] == "succeeded"
    assert (lost["status"], lost["error_kind"]) == ("failed", "process_exited"), lost
    assert second["status"] == "succeeded", second  # the very next call, on a new connection
    assert server_processes(token) not in ([], [killed])
    eventually(lambda: ConnectionStatus.objects.filter(server=server, status="connected").exists())
