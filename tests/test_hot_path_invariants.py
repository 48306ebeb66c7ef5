"""What a warm call guarantees, whatever the path does to be fast (issue 19, docs/performance.md):

- a rule committed before a call starts applies to it: several people call a tool at once, through
  the MCP endpoint of a real portal process and through the playground socket, while an admin adds a
  deny rule between two calls of one of them; every call sent after the rule was committed is refused
  (the violations are counted, and must be 0), and once the rule is deleted calls run again;
- every call has a durable record of its start and its decision before the server is called: the
  tool itself (tests/servers/record_probe_server.py) reads its own call's row from the portal's database,
  from another process, while it runs.

The test observes the behaviour only (what each call returned, what another process reads), so it holds
whatever the portal caches or batches to get there; and it times nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.utils import timezone

from tests.conftest import PortalProcess, database_url_of, serving
from tests.ws import Playground, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

TOOL = {
    "name": "probe",
    "description": "Look up this call's own record in the portal's database.",
    "inputSchema": {"type": "object", "properties": {"nonce": {"type": "string"}}, "required": ["nonce"]},
}
PATTERN = "mcp__probe__probe"
# Calls each client makes in every phase (before the rule, under it, after it), at least.
CALLS_PER_PHASE = 4


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, worker) -> Iterator[PortalProcess]:
    from django.db import connection

    with django_db_blocker.unblock():
        db = dict(connection.settings_dict)
    process = PortalProcess(db, Path(settings.VAR_DIR) / "test-hot-path-invariants.log").start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def probe_url(django_db_setup, django_db_blocker) -> Iterator[str]:
    """The record-probe server (tests/servers/record_probe_server.py) on the test database."""
    from django.db import connection

    with django_db_blocker.unblock():
        db = dict(connection.settings_dict)
    where = ["--sqlite", str(db["NAME"])] if settings.EMBEDDED else ["--postgres", database_url_of(db)]
    with serving("tests.servers.record_probe_server", *where) as port:
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.fixture
def probe(alice, probe_url):
    """The record-probe server, registered for Acme, allowed for the team, its tool list known."""
    from servers.models import Effect, PermissionRule, Server

    server = Server.objects.create(
        team=alice.memberships.get().team,
        name="probe",
        transport="http",
        url=probe_url,
        request_timeout=30,
        created_by=alice,
        tools=[TOOL],
        tools_listed_at=timezone.now(),
    )
    PermissionRule.objects.create(team=server.team, pattern="mcp__probe", effect=Effect.ALLOW)
    return server


@dataclass
class Call:
    client: str
    nonce: str
    sent: float  # time.monotonic() just before the request left the client
    ran: bool = False  # the server answered with this call's own record
    refused: bool = False
    found: dict[str, Any] | None = None
    error: str = ""


class Caller:
    """One client calling `probe` in a loop; it stops between two calls when asked to pause."""

    def __init__(self, name: str, call_once):
        self.name = name
        self.call_once = call_once
        self.calls: list[Call] = []
        self.pause = asyncio.Event()
        self.paused = asyncio.Event()
        self.resume = asyncio.Event()
        self.stop = False
        self._nonces = itertools.count()

    async def loop(self) -> None:
        while not self.stop:
            if self.pause.is_set():
                self.paused.set()
                await self.resume.wait()
                for event in (self.pause, self.paused, self.resume):
                    event.clear()
                continue
            call = Call(self.name, f"{self.name}-{next(self._nonces)}", time.monotonic())
            try:
                await self.call_once(call)
            except Exception as exc:  # noqa: BLE001 - recorded: the test reports every unexpected end
                call.error = f"{type(exc).__name__}: {exc}"
            self.calls.append(call)

    def after(self, moment: float) -> list[Call]:
        return [call for call in self.calls if call.sent > moment]


def read_probe(call: Call, text: str) -> None:
    found = json.loads(text)
    call.found, call.ran = found, True


async def endpoint_caller(url: str, token: str, name: str, callers: list[Caller], ready: asyncio.Event) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60, read=120))
    async with http, Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:

        async def once(call: Call) -> None:
            result = await client.call_tool("probe", {"nonce": call.nonce})
            text = result.content[0].text if result.content else ""
            if result.is_error:
                call.refused, call.error = PATTERN in text, text
            else:
                read_probe(call, text)

        callers.append(caller := Caller(name, once))
        ready.set()
        await caller.loop()


async def playground_caller(cookie: bytes, server_id: int, name: str, callers: list[Caller], ready: asyncio.Event):
    async with Playground(cookie) as ws:

        async def once(call: Call) -> None:
            ended = await ws.call(server_id, "probe", {"nonce": call.nonce}, timeout=120)
            if ended["status"] == "succeeded":
                read_probe(call, ended["result"]["content"][0]["text"])
            elif ended["status"] == "rejected":
                call.refused, call.error = True, ended.get("error", "")
            else:
                call.error = f"{ended['status']}: {ended.get('error')}"

        callers.append(caller := Caller(name, once))
        ready.set()
        await caller.loop()


async def until(condition, what: str, callers: list[Caller], patience: float = 240) -> None:
    """Wait for `condition()`; fail at once on a call that ended neither run nor refused by the rule.

    The patience is a safety net against a hang, not a timed assertion."""
    deadline = time.monotonic() + patience
    while not condition():
        unexpected = [call for caller in callers for call in caller.calls if call.error and not call.refused]
        assert unexpected == [], unexpected[:5]
        assert time.monotonic() < deadline, f"never happened: {what}"
        await asyncio.sleep(0.05)


async def paused(callers: list[Caller]) -> None:
    for caller in callers:
        caller.pause.set()
    await asyncio.gather(*(caller.paused.wait() for caller in callers))


def resume(callers: list[Caller]) -> None:
    for caller in callers:
        caller.resume.set()


def test_a_rule_committed_before_a_call_starts_applies_to_it_under_load(portal, alice, bob, make_user, probe, worker):
    from servers.actions import do_add_rule, do_delete_rule
    from servers.models import Effect
    from sessions.access_tokens import do_create_token
    from sessions.models import ToolCall

    people = [alice, bob, make_user("dave"), make_user("erin")]
    tokens = [do_create_token(person, "invariants")[1] for person in people]
    cookies = [session_cookie(person) for person in people[:2]]
    url = f"{portal.url}/mcp/probe/"

    async def scenario():
        callers: list[Caller] = []
        readies: list[asyncio.Event] = []
        tasks: list[asyncio.Task] = []

        def start(name: str, caller, *args) -> None:
            readies.append(ready := asyncio.Event())
            tasks.append(asyncio.create_task(caller(*args, name, callers, ready), name=name))

        for index, token in enumerate(tokens):
            start(f"mcp{index}", endpoint_caller, url, token)
        for index, cookie in enumerate(cookies):
            start(f"ws{index}", playground_caller, cookie, probe.pk)

        def ran(caller: Caller) -> int:
            return sum(call.ran for call in caller.calls)

        def after(moment: float) -> bool:
            return all(len(caller.after(moment)) >= CALLS_PER_PHASE for caller in callers)

        try:
            await until(
                lambda: all(r.is_set() for r in readies) or any(t.done() for t in tasks), "clients connected", callers
            )
            for task in tasks:
                if task.done():
                    task.result()  # a client that could not connect: its error
            await until(
                lambda: all(ran(c) >= CALLS_PER_PHASE for c in callers), "every client's calls running", callers
            )

            # Between two calls of the first client, the others calling meanwhile: an admin adds a deny rule.
            first = callers[0]
            await paused([first])
            rule = await asyncio.to_thread(do_add_rule, probe.team, None, PATTERN, Effect.DENY, alice)
            committed = time.monotonic()
            resume([first])
            await until(lambda: after(committed), "every client's calls after the rule", callers)

            # Every client stops between two calls, so that no call is in flight across the deletion.
            await paused(callers)
            removing = time.monotonic()
            await asyncio.to_thread(do_delete_rule, rule, alice)
            removed = time.monotonic()
            resume(callers)
            await until(lambda: after(removed), "every client's calls after the rule was deleted", callers)
            return callers, committed, removing, removed
        finally:
            for caller in callers:
                caller.stop = True
            resume(callers)
            await asyncio.gather(*tasks, return_exceptions=True)

    callers, committed, removing, removed = asyncio.run(scenario())
    calls = [call for caller in callers for call in caller.calls]
    under_rule = [call for call in calls if committed < call.sent < removing]
    after_rule = [call for call in calls if call.sent > removed]
    violations = [call for call in under_rule if not call.refused]
    assert under_rule and violations == [], (
        f"{len(violations)} of {len(under_rule)} calls ran under the rule: {violations[:3]}"
    )
    assert all(PATTERN in call.error for call in under_rule), {call.error for call in under_rule}
    refused_after = [call for call in after_rule if not call.ran]
    assert refused_after == [], refused_after
    unexpected = [call for call in calls if call.error and not call.refused]
    assert unexpected == [], unexpected
    # The first client's next call after the commit was the one "between two calls": refused.
    assert callers[0].after(committed)[0].refused

    # Durable start: each call that ran found its own row, committed, started and allowed, while it ran.
    ran = [call for call in calls if call.ran]
    wrong = [
        call for call in ran if call.found != {"records": 1, "status": "running", "effect": "allow", "started": True}
    ]
    assert ran and wrong == [], wrong
    # And every call, refused or run, has exactly one record with its decision.
    records = {row.arguments.get("nonce"): row for row in ToolCall.objects.filter(tool="probe")}
    missing = [call.nonce for call in calls if call.nonce not in records]
    assert missing == [], missing
    for call in calls:
        row = records[call.nonce]
        assert row.decision.get("effect") == ("deny" if call.refused else "allow"), (call, row.decision)
        assert row.status == ("rejected" if call.refused else "succeeded"), (call, row.status)
    assert ToolCall.objects.filter(tool="probe").count() == len(calls)
