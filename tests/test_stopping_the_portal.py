"""Stopping the portal (Ctrl+C, SIGTERM) with work in flight: `manage.py runportal` as a real process,
a person's call waiting on a form through real Daphne, then the signal. The process ends within five
seconds, says nothing alarming, and what was in flight ends as interrupted, its records kept. In the
distributed mode the same holds for a Celery worker's warm shutdown and the calls it runs."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from sessions import affinity
from sessions.models import (
    Approval,
    AuditEvent,
    CallStatus,
    ConnectionStatus,
    Elicitation,
    SamplingRequest,
    ToolCall,
)
from tests.conftest import PortalProcess
from tests.security.conftest import DaphneSocket
from tests.test_worker_affinity import start_worker, wait_until
from tests.ws import Playground, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)
embedded_only = pytest.mark.skipif(not settings.EMBEDDED, reason="in the distributed mode the portal runs no calls")

STOPPED_WITHIN = 5.0


class Portal(PortalProcess):
    """`manage.py runportal` on a free port, on the test database, with its stderr kept apart."""

    def __init__(self, tmp: Path):
        from django.db import connection

        super().__init__(connection.settings_dict, tmp / "portal.out", errors=tmp / "portal.err")
        self.start()

    def stop(self, signum: int) -> float:
        """Send `signum`; the seconds until the process ended (killed after 30 s, then it counts as 30)."""
        return super().stop(signum, patience=30)

    @property
    def stderr(self) -> str:
        return self.errors.read_text()


@pytest.fixture
def portal(tmp_path) -> Iterator[Portal]:
    running = Portal(tmp_path)
    yield running
    if running.process.poll() is None:
        running.process.kill()
        running.process.wait(5)


async def until(ws: DaphneSocket, type_: str, timeout: float = 30, **match: Any) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        event = await ws.receive(timeout=max(0.1, deadline - time.monotonic()))
        if event.get("type") == type_ and all(event.get(k) == v for k, v in match.items()):
            return event


async def start(ws: DaphneSocket, server_id: int, tool: str, arguments: dict[str, Any]) -> str:
    await ws.send({"type": "call", "ref": "r", "server": server_id, "tool": tool, "arguments": arguments})
    return (await until(ws, "call.accepted", ref="r"))["call"]


def open_a_form_then_stop(portal: Portal, cookie: bytes, server_id: int, signum: int) -> tuple[str, float]:
    """A call that waits on a form (with its connection open), then the signal; returns (call id, seconds to stop)."""

    async def scenario() -> str:
        async with DaphneSocket(portal.socket_address, cookie) as ws:
            call_id = await start(ws, server_id, "ask", {"topic": "x"})
            await until(ws, "elicitation.requested", call=call_id, timeout=60)
            return call_id

    call_id = asyncio.run(scenario())
    return call_id, portal.stop(signum)


@embedded_only
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_it_stops_within_five_seconds_and_the_waiting_call_ends_interrupted(alice, demo_server, portal, signum):
    call_id, seconds = open_a_form_then_stop(portal, session_cookie(alice), demo_server.pk, signum)

    assert seconds <= STOPPED_WITHIN, f"the portal took {seconds:.1f} s to stop"
    assert portal.process.returncode == 0, portal.stderr
    assert "Traceback" not in portal.stderr, portal.stderr
    call = ToolCall.objects.get(pk=call_id)
    assert (call.status, call.error_kind) == (CallStatus.INTERRUPTED, "interrupted"), call.error
    assert "the portal stopped" in call.error.lower()
    assert call.finished_at is not None
    (form,) = Elicitation.objects.filter(call=call)
    assert form.state == "interrupted" and form.answered_at is not None
    assert [row.outcome for row in AuditEvent.objects.filter(call_id=call.pk, kind="call")] == ["interrupted"]
    # The connection it held is closed: after a restart nothing shows "connected" with nothing open.
    assert not ConnectionStatus.objects.filter(server=demo_server).exists()


@embedded_only
def test_a_sampling_request_open_when_the_portal_stops_ends_interrupted(alice, demo_server, portal):
    cookie = session_cookie(alice)

    async def scenario() -> str:
        async with DaphneSocket(portal.socket_address, cookie) as ws:
            call_id = await start(ws, demo_server.pk, "summarize", {"text": "a long story"})
            await until(ws, "sampling.requested", call=call_id, timeout=60)
            return call_id

    call_id = asyncio.run(scenario())
    seconds = portal.stop(signal.SIGTERM)

    assert seconds <= STOPPED_WITHIN, f"the portal took {seconds:.1f} s to stop"
    assert "Traceback" not in portal.stderr, portal.stderr
    call = ToolCall.objects.get(pk=call_id)
    assert (call.status, call.error_kind) == (CallStatus.INTERRUPTED, "interrupted"), call.error
    assert [ask.state for ask in SamplingRequest.objects.filter(call=call)] == ["interrupted"]


@embedded_only
def test_it_stops_within_five_seconds_while_a_tool_runs(alice, demo_server, portal):
    cookie = session_cookie(alice)

    async def scenario() -> str:
        async with DaphneSocket(portal.socket_address, cookie) as ws:
            call_id = await start(ws, demo_server.pk, "sleep", {"seconds": 600})
            await until(ws, "call.log", call=call_id, timeout=60)  # the server is sleeping now
            return call_id

    call_id = asyncio.run(scenario())
    seconds = portal.stop(signal.SIGTERM)

    assert seconds <= STOPPED_WITHIN, f"the portal took {seconds:.1f} s to stop"
    assert "Traceback" not in portal.stderr, portal.stderr
    call = ToolCall.objects.get(pk=call_id)
    assert (call.status, call.error_kind) == (CallStatus.INTERRUPTED, "interrupted"), call.error


@embedded_only
def test_an_approval_waiting_when_the_portal_stops_ends_interrupted(alice, demo_server, portal):
    cookie = session_cookie(alice)
    # Known as a tool that is not read-only, so the portal asks before any worker sees the call.
    demo_server.tools = [{"name": "spawn", "inputSchema": {"type": "object"}, "annotations": {}}]
    demo_server.save(update_fields=["tools"])

    async def scenario() -> str:
        async with DaphneSocket(portal.socket_address, cookie) as ws:
            call_id = await start(ws, demo_server.pk, "spawn", {})
            await until(ws, "approval.requested", call=call_id)
            return call_id

    call_id = asyncio.run(scenario())
    seconds = portal.stop(signal.SIGTERM)

    assert seconds <= STOPPED_WITHIN, f"the portal took {seconds:.1f} s to stop"
    assert "Traceback" not in portal.stderr, portal.stderr
    call = ToolCall.objects.get(pk=call_id)
    assert (call.status, call.error_kind) == (CallStatus.INTERRUPTED, "interrupted"), call.error
    (approval,) = Approval.objects.filter(call=call)
    assert approval.state == "interrupted"
    assert [row.outcome for row in AuditEvent.objects.filter(call_id=call.pk, kind="call")] == ["interrupted"]


@pytest.mark.skipif(settings.EMBEDDED, reason="workers are processes of their own in the distributed mode")
def test_a_workers_warm_shutdown_ends_its_calls_interrupted_within_five_seconds(alice, demo_server, settings, tmp_path):
    queue = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-warm-shutdown"
    settings.CELERY_TASK_DEFAULT_QUEUE = queue  # so the suite's worker takes none of these calls
    log = tmp_path / "worker.log"
    process = start_worker(queue, "warm", log)
    name = f"{socket.gethostname()}:{process.pid}"
    cookie = session_cookie(alice)
    try:
        wait_until(lambda: affinity.is_alive(name), 60, "the worker did not report in")

        async def scenario() -> tuple[dict[str, Any], float]:
            async with Playground(cookie) as ws:
                accepted = await ws.start(demo_server.pk, "ask", {"topic": "x"})
                await ws.until("elicitation.requested", call=accepted["call"], timeout=60)
                sent = time.monotonic()
                process.terminate()  # Celery's warm shutdown
                await asyncio.get_running_loop().run_in_executor(None, process.wait, 30)
                seconds = time.monotonic() - sent
                return await ws.until("call.ended", call=accepted["call"], timeout=10), seconds

        ended, seconds = asyncio.run(scenario())
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)
    assert seconds <= STOPPED_WITHIN, f"the worker took {seconds:.1f} s to stop"
    assert "Traceback" not in log.read_text(), log.read_text()
    assert (ended["status"], ended["error_kind"]) == ("interrupted", "interrupted"), ended
    call = ToolCall.objects.get(pk=ended["call"])
    assert call.status == CallStatus.INTERRUPTED and call.worker == name
    assert [form.state for form in Elicitation.objects.filter(call=call)] == ["interrupted"]
    assert not ConnectionStatus.objects.filter(worker=name).exists()


def test_statuses_left_by_a_portal_killed_outright_are_cleared_when_the_next_one_starts(alice, demo_server):
    from sessions.affinity import WORKER_NAME
    from sessions.worker import forget_gone_local_workers

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = WORKER_NAME.rsplit(":", 1)[0]
    for owner, worker in ((f"user:{alice.pk}", f"{host}:{gone.pid}"), ("user:999", WORKER_NAME)):
        ConnectionStatus.objects.create(server=demo_server, owner=owner, status="connected", worker=worker)

    assert forget_gone_local_workers() == 1
    assert list(ConnectionStatus.objects.values_list("worker", flat=True)) == [WORKER_NAME]  # this one runs
