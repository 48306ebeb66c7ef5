"""The database work of one warm tool call, counted: the hot path must not grow queries unnoticed
(docs/performance.md). Every statement this process sends: the consumer's, and in the embedded mode
the worker's too (in the distributed mode the worker is another process)."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import pytest
from django.conf import settings
from django.db.backends import utils

from tests.ws import Playground, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


@pytest.fixture
def statements(monkeypatch):
    seen: list[str] = []
    lock = threading.Lock()
    original = utils.CursorWrapper.execute

    def execute(self, sql, params=None):
        # Not the call's work: the worker's heartbeat (it sweeps every few seconds from a thread of
        # its own), and the connection's status, written when the warm-up call opened it.
        background = threading.current_thread().name == "portal-heartbeat" or "connectionstatus" in sql
        if not background:
            with lock:
                seen.append(sql)
        return original(self, sql, params)

    monkeypatch.setattr(utils.CursorWrapper, "execute", execute)
    return seen


async def worker_settled() -> None:
    """The sync point: the worker has written everything it queued beside the calls so far.

    Embedded, the worker's statements are counted, and it records connection statuses and the
    negotiated era from an ordered queue after the call ends: wait until that queue is empty. In the
    distributed mode only this process's statements are counted, and the consumer's are all made
    before its call is sent; call.ended is the sync point there.
    """
    if settings.EMBEDDED:
        from sessions.worker import get_pool

        await asyncio.wait_for(asyncio.wrap_future(get_pool().submit(get_pool().events.settled())), 30)


@pytest.fixture(params=["stdio", "http"])
def server(request, alice, demo_server):
    if request.param == "stdio":
        return demo_server
    demo_server.transport, demo_server.url = "http", request.getfixturevalue("demo_http_url")
    demo_server.command, demo_server.args = "", []
    demo_server.save()
    return demo_server


def test_a_warm_call_costs_a_fixed_small_number_of_statements(alice, server, statements):
    demo_server = server
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            warm = await ws.call(demo_server.pk, "echo", {"message": "warm up"})
            assert warm["status"] == "succeeded", warm
            await worker_settled()  # the first call's bookkeeping (the status row, the era) is written
            # The first call recorded the server's tool list, a change to what decisions read: the
            # second reads the rows again and caches them (servers/decisions.py). Warm is after that.
            again = await ws.call(demo_server.pk, "echo", {"message": "warm up again"})
            assert again["status"] == "succeeded", again
            await worker_settled()
            before = len(statements)
            ended = await ws.call(demo_server.pk, "echo", {"message": "counted"})
            await worker_settled()  # and anything the counted call left queued is counted too
            return ended, statements[before:]

    ended, sql = asyncio.run(scenario())
    assert ended["status"] == "succeeded", ended
    generation = [statement for statement in sql if "servers_generation" in statement]
    kinds = Counter(statement.split()[0] for statement in sql if statement.split()[0] != "BEGIN")
    kinds -= Counter({"SELECT": len(generation)})
    # The consumer: the call's row. The server (with its team's policy) and the rules are the ones
    # this process cached, checked by one read of the decisions' generation number each.
    expected = Counter({"INSERT": 1})
    reads = 2
    if settings.EMBEDDED:
        # The worker: claim (with its channel); the call with its server; the rules again (decided
        # anew on the live definition: from the cache, by the generation number); the end and its
        # audit row. No credentials query: the demo server runs on stdio and references no secret.
        # A warm connection's unchanged tool list is neither read back nor written.
        expected += Counter({"UPDATE": 2, "SELECT": 1, "INSERT": 1})
        reads += 1
        if server.transport == "http":
            # The credentials: OAuth may apply over HTTP (the OAuth settings come with the call's row).
            expected += Counter({"SELECT": 1})
    assert kinds == expected, "\n".join(sql)
    assert len(generation) == reads, "\n".join(sql)
