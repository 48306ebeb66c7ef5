"""Warm calls go straight to the worker holding the session, with no Celery task between
(sessions/worker/lane.py): the playground's and the MCP endpoint's alike."""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings

from sessions import queue
from sessions.models import ToolCall
from tests.ws import Playground, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


@pytest.fixture
def celery_tasks(monkeypatch):
    """The tasks this process sends through Celery, by name."""
    sent: list[str] = []
    original = queue.send

    def send(task, args, worker="", countdown=None):
        sent.append(task)
        return original(task, args, worker, countdown)

    monkeypatch.setattr(queue, "send", send)
    return sent


def test_a_warm_call_reaches_its_worker_without_a_celery_task(alice, demo_server, celery_tasks):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            # The first call opens the session; in the distributed mode it goes to the shared queue.
            first = await ws.call(demo_server.pk, "echo", {"message": "cold"})
            sent_before = list(celery_tasks)
            warm = [await ws.call(demo_server.pk, "echo", {"message": f"warm {n}"}) for n in range(3)]
            return first, sent_before, warm

    first, sent_before, warm = asyncio.run(scenario())
    assert first["status"] == "succeeded", first
    assert all(ended["status"] == "succeeded" for ended in warm), warm
    if settings.EMBEDDED:
        assert "sessions.run_tool_call" not in sent_before  # the one worker is in this process
    ran = ToolCall.objects.filter(pk__in=[ended["call"] for ended in warm])
    assert {call.worker for call in ran} == {ToolCall.objects.get(pk=first["call"]).worker}
    # No warm call went through Celery: each was handed to the worker that held the session.
    assert celery_tasks.count("sessions.run_tool_call") == sent_before.count("sessions.run_tool_call")
