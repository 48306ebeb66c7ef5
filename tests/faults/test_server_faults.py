"""Servers that misbehave mid-call, and a browser that goes away mid-call: each call's record ends
with a status and a reason, its audit row is there, and the portal goes on serving."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from django.conf import settings

from sessions.models import CallStatus, ToolCall
from tests.faults.conftest import assert_no_call_left_running, assert_recorded, holder_of
from tests.ws import Playground, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for_file(path: Path, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear")
        time.sleep(0.05)
    return path.read_text()


async def still_serving(ws: Playground, server_id: int) -> None:
    """The same server answers again (the pool reconnects where it must)."""
    ended = await ws.call(server_id, "environment", {}, timeout=60)
    assert ended["status"] == "succeeded", ended


def test_a_server_killed_mid_call(alice, fault_server, worker, tmp_path):
    cookie = session_cookie(alice)
    pidfile = tmp_path / "server.pid"

    async def scenario():
        async with Playground(cookie) as ws:
            accepted = await ws.start(fault_server.pk, "hang", {"pidfile": str(pidfile)})
            await asyncio.to_thread(wait_for_file, pidfile)
            os.kill(holder_of(pidfile), signal.SIGKILL)
            ended = await ws.until("call.ended", call=accepted["call"], timeout=60)
            await still_serving(ws, fault_server.pk)
            return ended

    ended = asyncio.run(scenario())
    assert ended["status"] == "failed" and ended["error_kind"] in ("process_exited", "connection_lost"), ended
    assert_recorded(ended["call"], CallStatus.FAILED)
    assert_no_call_left_running()


def test_a_server_flooding_notifications(alice, fault_server, worker):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(fault_server.pk, "flood", {"count": 3000}, timeout=120)
            await still_serving(ws, fault_server.pk)
            return ended, ws.seen

    ended, seen = asyncio.run(scenario())
    assert ended["status"] == "succeeded", ended
    assert ended["result"]["content"][0]["text"] == "sent 3000 of each"
    call = assert_recorded(ended["call"], CallStatus.SUCCEEDED)
    assert len(call.details["progress"]) == 200  # the record keeps a bounded sample
    # The page gets a bounded number of progress events (a burst, then a rate), the last one included.
    shown = [e for e in seen if e.get("type") == "call.progress" and e.get("call") == ended["call"]]
    assert 20 <= len(shown) < 3000 and shown[-1]["progress"] == 3000
    # Log lines are thinned out the same way, each saying how many were left out before it.
    logs = [e for e in seen if e.get("type") == "call.log" and e.get("call") == ended["call"]]
    assert 20 <= len(logs) < 3000 and len(logs) + sum(e.get("skipped", 0) for e in logs) <= 3000
    assert_no_call_left_running()


def test_a_server_answering_with_50_megabytes(alice, fault_server, worker):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(fault_server.pk, "huge", {"megabytes": 50}, timeout=300)
            await still_serving(ws, fault_server.pk)
            return ended

    ended = asyncio.run(scenario())
    assert ended["status"] == "succeeded", {k: v for k, v in ended.items() if k != "result"}
    # Daphne sends nothing over 1 MiB: the event goes without the result, saying where it is.
    # Cut as Claude Code cuts it (MCP_MAX_OUTPUT_TOKENS), so the event fits the socket; the notice says so.
    assert ended["result"]["content"][-1]["text"].startswith("[OUTPUT TRUNCATED"), ended.get("omitted")
    assert ended["details"]["truncated"]["full_bytes"] > 50 * 1024 * 1024
    call = assert_recorded(ended["call"], CallStatus.SUCCEEDED)
    assert call.result["content"][-1]["text"].startswith("[OUTPUT TRUNCATED")
    # The whole output is kept for download, up to its cap: never lost, never a failure.
    assert len(call.full_output) == settings.MCP_FULL_OUTPUT_MAX_BYTES
    assert_no_call_left_running()


def test_a_server_sending_invalid_json_rpc(alice, fault_server, worker):
    fault_server.request_timeout = 3
    fault_server.save()
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            # Garbage, then the answer: the garbage is dropped, the answer arrives.
            answered = await ws.call(fault_server.pk, "garbage", {}, timeout=60)
            # Garbage and no answer: the call ends at its deadline.
            silent = await ws.call(fault_server.pk, "garbage_only", {}, timeout=60)
            await still_serving(ws, fault_server.pk)
            return answered, silent

    answered, silent = asyncio.run(scenario())
    assert (
        answered["status"] == "succeeded" and answered["result"]["content"][0]["text"] == "answered after the garbage"
    )
    assert silent["status"] == "timed_out" and "3 s" in silent["error"], silent
    assert_recorded(answered["call"], CallStatus.SUCCEEDED)
    assert_recorded(silent["call"], CallStatus.TIMED_OUT)
    assert_no_call_left_running()


def test_the_browser_disconnects_mid_call_and_comes_back(alice, fault_server, worker, tmp_path):
    cookie = session_cookie(alice)
    release = tmp_path / "release"

    async def scenario():
        async with Playground(cookie) as ws:
            accepted = await ws.start(fault_server.pk, "wait_for", {"path": str(release)})
            await ws.until("call.started", call=accepted["call"])
        # The page is gone while the call runs. It comes back; then the call ends.
        async with Playground(cookie) as ws:
            await ws.send({"type": "list_approvals"})  # what the playground asks on every (re)connect
            await ws.until("approvals")
            release.write_text("go")
            ended = await ws.until("call.ended", call=accepted["call"], timeout=60)
            await still_serving(ws, fault_server.pk)
            return ended

    ended = asyncio.run(scenario())
    assert ended["status"] == "succeeded", ended
    assert_recorded(ended["call"], CallStatus.SUCCEEDED)
    assert ToolCall.objects.get(pk=ended["call"]).result["content"][0]["text"] == "the file is there"
    assert_no_call_left_running()


def test_a_server_answering_with_nul_characters(alice, fault_server, worker):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(fault_server.pk, "nul", {}, timeout=60)
            await still_serving(ws, fault_server.pk)
            return ended

    ended = asyncio.run(scenario())
    assert ended["status"] == "succeeded", ended
    call = assert_recorded(ended["call"], CallStatus.SUCCEEDED)
    assert call.result["content"][0]["text"] == "before\ufffdafter"  # stored, the NUL replaced
    assert_no_call_left_running()


def test_structured_content_that_breaks_the_output_schema_says_so(alice, fault_server, worker):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(fault_server.pk, "mismatch", {}, timeout=60)
            await still_serving(ws, fault_server.pk)
            return ended

    ended = asyncio.run(scenario())
    # The SDK refuses such an answer; the call says which field broke which rule, and the session lives on.
    assert (ended["status"], ended["error_kind"]) == ("failed", "output_schema_mismatch"), ended
    assert ended["error"] == (
        "The tool's structured content does not match its output schema at count: 'many' is not of type 'integer'."
    )
    assert_recorded(ended["call"], CallStatus.FAILED)
    assert_no_call_left_running()
