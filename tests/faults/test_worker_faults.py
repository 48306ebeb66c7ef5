"""A worker killed mid-call (distributed mode, two real Celery workers): the call ends failed with
the reason, its audit row is written, and the other worker serves the next call."""

from __future__ import annotations

import asyncio
import signal

import pytest
from django.conf import settings

from sessions.models import CallStatus, ToolCall
from tests.faults.conftest import assert_no_call_left_running, assert_recorded
from tests.test_worker_affinity import two_workers  # noqa: F401 - the fixture
from tests.ws import Playground, session_cookie

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(settings.EMBEDDED, reason="workers are processes of their own in the distributed mode"),
]


def test_a_worker_killed_mid_call(alice, fault_server, two_workers, tmp_path):  # noqa: F811
    cookie = session_cookie(alice)
    release = tmp_path / "release"

    async def scenario():
        async with Playground(cookie) as ws:
            accepted = await ws.start(fault_server.pk, "wait_for", {"path": str(release)})
            started = await ws.until("call.started", call=accepted["call"], timeout=60)
            victim = two_workers[started["worker"]]
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            # The survivor notices the missing heartbeat and ends the call.
            ended = await ws.until("call.ended", call=accepted["call"], timeout=60)
            again = await ws.call(fault_server.pk, "environment", {}, timeout=60)
            return started["worker"], ended, again

    try:
        victim, ended, again = asyncio.run(scenario())
    finally:
        release.write_text("go")  # the killed worker's server process may still wait for it
    assert ended["status"] == "failed" and ended["error_kind"] == "worker_lost", ended
    assert victim in ended["error"]
    assert_recorded(ended["call"], CallStatus.FAILED)
    assert again["status"] == "succeeded"
    assert ToolCall.objects.get(pk=again["call"]).worker != victim
    assert_no_call_left_running()
