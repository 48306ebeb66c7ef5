"""Affinity in the distributed mode: calls for one (server, user) session go to the worker holding it,
and fail over to another worker when that one dies. Two real Celery worker processes on Redis."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from sessions import affinity
from sessions.models import ToolCall
from tests.conftest import DEMO_ARGS, ROOT, database_url_of, server_processes, stop
from tests.ws import Playground, session_cookie

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(settings.EMBEDDED, reason="affinity is between worker processes on Redis"),
]


def start_worker(queue: str, label: str, log: Path) -> subprocess.Popen:
    from django.db import connection

    env = {
        **os.environ,
        "DATABASE_URL": database_url_of(connection.settings_dict),
        "CELERY_QUEUE": queue,
        "PORTAL_WORKER_HEARTBEAT_SECONDS": "0.5",
        "MCP_HEALTH_CHECK_SECONDS": "0",
    }
    command = [sys.executable, "-m", "celery", "-A", "portal", "worker", "-P", "threads", "-c", "4"]
    command += ["--without-mingle", "--without-gossip", "-l", "WARNING", "-n", f"{label}-{os.getpid()}@%h"]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


@pytest.fixture
def two_workers(settings, tmp_path):
    """Workers A and B on a shared queue of their own, so the suite's worker takes none of these calls."""
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-affinity"
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    settings.PORTAL_WORKER_HEARTBEAT_SECONDS = 0.5
    processes = [start_worker(queue, label, tmp_path / f"{label}.log") for label in ("a", "b")]
    names = {f"{socket.gethostname()}:{process.pid}": process for process in processes}
    try:
        wait_until(lambda: all(affinity.is_alive(name) for name in names), 60, "the two workers did not report in")
        yield names
    finally:
        for process in processes:
            if process.poll() is None:
                stop(process)


def test_calls_stay_with_the_worker_holding_the_session_and_fail_over_when_it_dies(alice, demo_server, two_workers):
    cookie = session_cookie(alice)

    async def calls(count: int) -> list[dict]:
        async with Playground(cookie) as ws:
            return [await ws.call(demo_server.pk, "echo", {"message": str(i)}, timeout=60) for i in range(count)]

    first = asyncio.run(calls(6))
    assert [e["status"] for e in first] == ["succeeded"] * 6
    holders = {ToolCall.objects.get(pk=e["call"]).worker for e in first}
    assert len(holders) == 1, f"the calls were spread over {holders}"
    (holder,) = holders
    survivor = next(name for name in two_workers if name != holder)

    # The holder dies without a word; a call sent now may still be routed to it: it must run anyway.
    two_workers[holder].send_signal(signal.SIGKILL)
    two_workers[holder].wait(10)
    after = asyncio.run(calls(3))
    assert [e["status"] for e in after] == ["succeeded"] * 3
    assert {ToolCall.objects.get(pk=e["call"]).worker for e in after} == {survivor}


def test_a_worker_that_stops_leaves_no_stdio_process_behind(alice, demo_server, settings, tmp_path):
    from sessions.mcp.processes import group_members

    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-stopping"
    settings.CELERY_TASK_DEFAULT_QUEUE = queue
    process = start_worker(queue, "stopping", tmp_path / "stopping.log")
    name = f"{socket.gethostname()}:{process.pid}"
    # A token on the server's command line finds its host process: inside its sandbox it is pid 2.
    token = f"stopping-{uuid.uuid4().hex}"
    demo_server.args = [*DEMO_ARGS, "stdio", "--host", token]
    demo_server.save(update_fields=["args"])
    try:
        wait_until(lambda: affinity.is_alive(name), 60, "the worker did not report in")
        cookie = session_cookie(alice)

        async def spawn() -> dict:
            async with Playground(cookie) as ws:
                # spawn is not read-only, so the default policy asks first.
                return await ws.call(demo_server.pk, "spawn", {"stubborn": True}, timeout=60, approve="allow_once")

        ended = asyncio.run(spawn())
        assert ended["status"] == "succeeded", ended
        (server_pid,) = server_processes(token)
        group = os.getpgid(server_pid)  # the sandbox's group: bwrap, the server and its stubborn child
        assert len(group_members(group)) >= 3

        process.terminate()  # Celery's warm shutdown: worker_shutdown closes the pool
        process.wait(30)
        assert group_members(group) == []
        assert not affinity.is_alive(name)  # gone at once, not after the heartbeat's TTL
    finally:
        if process.poll() is None:
            stop(process)


def test_resources_prompts_and_subscriptions_reach_the_worker_holding_the_session(alice, demo_server, two_workers):
    """Not only calls: every request for a session goes where it is held, so no second connection opens
    in the other worker, and an unsubscribe reaches the worker holding the subscription."""
    from sessions.models import ConnectionStatus

    cookie = session_cookie(alice)

    async def scenario() -> tuple[str, list[dict], list[dict]]:
        async with Playground(cookie) as ws:
            first = await ws.call(demo_server.pk, "echo", {"message": "hold"}, timeout=60)
            asked = [
                ({"type": "list_resources"}, "resources"),
                ({"type": "read_resource", "uri": "demo://counter"}, "resource.read"),
                ({"type": "list_prompts"}, "prompts"),
                ({"type": "subscribe_resource", "uri": "demo://counter"}, "resource.subscribed"),
                ({"type": "list_resources"}, "resources"),
                ({"type": "read_resource", "uri": "demo://counter"}, "resource.read"),
            ]
            answers = []
            for i, (message, answer) in enumerate(asked):
                await ws.send({**message, "ref": f"r{i}", "server": demo_server.pk})
                answers.append(await ws.until(answer, ref=f"r{i}", timeout=60))
            await ws.send(
                {"type": "unsubscribe_resource", "ref": "u", "server": demo_server.pk, "uri": "demo://counter"}
            )
            answers.append(await ws.until("resource.unsubscribed", ref="u", timeout=60))
            # The holder let go: touching the resource now brings no update.
            touched = await ws.call(demo_server.pk, "touch_resource", approve="allow_once", timeout=60)
            await asyncio.sleep(1.0)
            updates = [e for e in ws.seen if e["type"] == "resource.updated"]
            return first["call"], [touched, *answers], updates

    call_id, answers, updates = asyncio.run(scenario())
    touched, *answered = answers
    assert touched["status"] == "succeeded", touched
    assert [a.get("error") for a in answered] == [None] * len(answered), answered
    holder = ToolCall.objects.get(pk=call_id).worker
    assert holder in two_workers
    # Each worker records the connections it opened: one, in the holder.
    assert set(ConnectionStatus.objects.filter(server=demo_server).values_list("worker", flat=True)) == {holder}
    assert updates == []
