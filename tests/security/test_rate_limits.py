"""Rate limits: tool calls per person (over the WebSocket, shared by every web process) and logins."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
import uuid

import pytest
from django.conf import settings as django_settings
from django.test import Client

from sessions import limits
from sessions.models import ToolCall
from tests.conftest import ROOT
from tests.helpers import login
from tests.ws import Playground, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def forget_counts(user_id: int) -> None:
    """Counts live in the cache, which outlives a test database: start this person at zero."""
    from django.core.cache import cache

    bucket = int(time.time() // limits.WINDOW)
    cache.delete_many([f"portal:calls:{user_id}:{b}" for b in range(bucket - 2, bucket + 2)])


def test_calls_over_the_limit_are_refused_with_a_reason_and_not_started(alice, bob, demo_server, worker, settings):
    settings.PORTAL_TOOL_CALLS_PER_MINUTE = 3
    forget_counts(alice.pk)
    forget_counts(bob.pk)
    alice_cookie, bob_cookie = session_cookie(alice), session_cookie(bob)

    async def scenario():
        async with Playground(alice_cookie) as ws:
            ended = [await ws.call(demo_server.pk, "echo", {"message": str(i)}) for i in range(3)]
            await ws.send({"type": "call", "ref": "over", "server": demo_server.pk, "tool": "echo", "arguments": {}})
            refused = await ws.until("error", ref="over")
        async with Playground(bob_cookie) as ws:
            other = await ws.call(demo_server.pk, "echo", {"message": "bob"})
        return ended, refused, other

    ended, refused, other = asyncio.run(scenario())
    assert [e["status"] for e in ended] == ["succeeded"] * 3
    assert refused["kind"] == "rate_limited"
    assert "at most 3 a minute" in refused["message"] and "not started" in refused["message"]
    assert 1 <= refused["retry_after"] <= 120
    assert ToolCall.objects.filter(user=alice).count() == 3  # the refused call left no record
    assert other["status"] == "succeeded"  # one person's limit is theirs alone


@pytest.mark.skipif(django_settings.EMBEDDED, reason="one process in the embedded mode")
def test_the_count_is_shared_by_every_web_process(alice, settings):
    settings.PORTAL_TOOL_CALLS_PER_MINUTE = 3
    forget_counts(alice.pk)
    # Another process (another daphne, say) takes the three calls of this minute.
    code = f"import django; django.setup(); from sessions import limits; [limits.take_tool_call({alice.pk}) for _ in range(3)]"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_TOOL_CALLS_PER_MINUTE": "3"}
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=60)
    with pytest.raises(limits.RateLimited):
        limits.take_tool_call(alice.pk)


def test_the_window_slides(settings, alice):
    settings.PORTAL_TOOL_CALLS_PER_MINUTE = 2
    forget_counts(alice.pk)
    start = (int(time.time() // 60) + 0.9) * 60  # late in this minute's bucket
    limits.take_tool_call(alice.pk, now=start)
    limits.take_tool_call(alice.pk, now=start + 1)
    with pytest.raises(limits.RateLimited) as caught:
        limits.take_tool_call(alice.pk, now=start + 7)  # the next bucket: the last one still counts
    assert caught.value.retry_after > 0
    limits.take_tool_call(alice.pk, now=start + 61)  # a minute after the first: it has slid out


def test_calls_go_through_when_the_cache_is_down_and_it_is_logged(
    alice, demo_server, worker, settings, monkeypatch, caplog
):
    """A limit of one call a minute, and the cache that counts them unreachable: the limit cannot be
    enforced, and an outage must not stop every call, so both calls run, and each says why in the log."""
    from django.core.cache.backends.redis import RedisCache

    from tests.conftest import free_port

    settings.PORTAL_TOOL_CALLS_PER_MINUTE = 1
    # A real cache client whose Redis is not there (nothing listens on the port): the edge, down.
    monkeypatch.setattr(limits, "cache", RedisCache(f"redis://127.0.0.1:{free_port()}/0", {}))
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return [await ws.call(demo_server.pk, "echo", {"message": str(i)}) for i in range(2)]

    with caplog.at_level("WARNING", logger="sessions.limits"):
        ended = asyncio.run(scenario())
    assert [e["status"] for e in ended] == ["succeeded", "succeeded"]
    warnings = [r for r in caplog.records if r.name == "sessions.limits"]
    assert [r.getMessage() for r in warnings] == ["could not count a tool call for the rate limit"] * 2
    assert all(r.exc_info and "Connection" in type(r.exc_info[1]).__name__ for r in warnings)


def test_repeated_failed_logins_lock_the_account_for_a_while(make_user):
    # allauth's counts outlive the test database (they are in the cache) and are kept per account id,
    # which SQLite hands out again after a rollback: a name and an id no other test's account has.
    name = f"target{uuid.uuid4().hex[:8]}"
    make_user(name, id=random.randrange(10**6, 10**9))
    client = Client()
    for _ in range(5):
        assert login(client, name, "wrong").status_code == 200
    response = login(Client(), name, "pw-" + name)  # the right password, from a fresh session
    assert response.status_code == 200
    assert "Too many failed login attempts" in response.content.decode()
