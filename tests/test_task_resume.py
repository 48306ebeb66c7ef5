"""A call's MCP task outlives the worker that started it: its state is on the record, and the next
worker follows the same task (no second tools/call) to its end. Against the demo server's `research`
task over Streamable HTTP, whose tasks belong to the server process, not to one session."""

from __future__ import annotations

import asyncio
import signal

import pytest
from django.conf import settings

from servers.models import Effect, PermissionRule, Server
from sessions.mcp.config import ConnectionKey, ServerConfig
from sessions.mcp.pool import CallHooks
from sessions.mcp.ssrf import LOCAL_NETWORK
from sessions.models import CallStatus, ToolCall
from tests.conftest import connection_pool
from tests.test_worker_affinity import two_workers  # noqa: F401 - the fixture
from tests.ws import Playground, session_cookie

ERAS = ["legacy", "modern"]


@pytest.mark.parametrize("era", ERAS)
def test_a_pool_that_did_not_start_a_task_follows_it_to_its_end(demo_http_url, era):
    config = ServerConfig(network=LOCAL_NETWORK, name="demo", transport="http", url=demo_http_url, protocol=era)
    key = ConnectionKey.for_owner(1, config, "user:1")
    arguments = {"topic": "tides", "steps": 6, "step_seconds": 0.3}
    seen: list[dict] = []
    started = asyncio.Event()

    async def on_task(state: dict) -> None:
        seen.append(state)
        started.set()

    # The first worker: the task begins, then the worker stops (it leaves the task running).
    with connection_pool() as first:

        async def begin() -> None:
            hooks = CallHooks(on_task=on_task, cancel_on_stop=lambda: False)
            call = asyncio.ensure_future(first.call_tool(key, config, "research", arguments, hooks=hooks, as_task=True))
            await asyncio.wait_for(started.wait(), 30)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call

        first.run(begin(), timeout=60)
    begun = dict(seen[-1])
    assert begun["era"] == era and begun["status"] == "working", begun

    # The next worker, with a connection of its own, knows only what the record kept.
    with connection_pool() as second:
        hooks = CallHooks(on_task=on_task)
        outcome = second.run(second.call_tool(key, config, "research", {}, hooks=hooks, resume=begun), timeout=60)
    assert outcome.status == "succeeded", outcome.failure
    assert outcome.result["structuredContent"] == {"topic": "tides", "angle": "general", "steps": 6}
    assert seen[-1]["status"] == "completed" and seen[-1]["id"] == begun["id"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(settings.EMBEDDED, reason="workers are processes of their own in the distributed mode")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_worker_that_stops_mid_task_leaves_it_to_the_next_one(alice, demo_http_url, two_workers, signum):  # noqa: F811
    """Stopped (a warm shutdown: the worker hands the call back) or killed (the survivor's sweep
    hands it back): the survivor follows the same task, and the call ends with its result."""
    team = alice.memberships.get().team
    server = Server.objects.create(team=team, name="demo", transport="http", url=demo_http_url, created_by=alice)
    PermissionRule.objects.create(team=team, pattern="mcp__demo", effect=Effect.ALLOW)
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            arguments = {"topic": "tides", "steps": 10, "step_seconds": 0.5}
            await ws.send(
                {
                    "type": "call",
                    "ref": "r",
                    "server": server.pk,
                    "tool": "research",
                    "arguments": arguments,
                    "as_task": True,
                }
            )
            call = (await ws.until("call.accepted", ref="r", timeout=60))["call"]
            started = await ws.until("call.started", call=call, timeout=60)
            first = await ws.until("call.task", call=call, timeout=60)
            victim = two_workers[started["worker"]]
            victim.send_signal(signum)
            victim.wait(30)
            ended = await ws.until("call.ended", call=call, timeout=90)
            return started["worker"], first["task"], ended

    victim, first, ended = asyncio.run(scenario())
    assert ended["status"] == CallStatus.SUCCEEDED, ended
    assert ended["result"]["structuredContent"]["steps"] == 10
    record = ToolCall.objects.get(pk=ended["call"])
    assert record.worker != victim, "the survivor ended it"
    assert record.task["id"] == first["id"] and record.task["status"] == "completed", "the same task, followed"
