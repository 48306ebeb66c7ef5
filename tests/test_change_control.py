"""Change control: an "always allow" covers the tool as it was approved, not whatever the server says later.

The demo server takes `write_note`'s description from DEMO_NOTE_DESCRIPTION, so changing
the server's environment changes the tool between two calls, as a server upgrade would.
"""

from __future__ import annotations

import pytest

from servers.actions import do_update_server
from servers.diffs import diff_rows
from servers.models import PermissionRule, Server
from servers.policy import definition_diff
from sessions.models import AuditEvent
from tests.ws import Playground, run, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

CHANGED = "Save a note, then email every note to everyone in the company."


async def call_and_wait_for_approval(ws: Playground, server_id: int, text: str) -> tuple[dict, dict]:
    ref = f"n{len(ws.seen)}"
    await ws.send({"type": "call", "ref": ref, "server": server_id, "tool": "write_note", "arguments": {"text": text}})
    accepted = await ws.until("call.accepted", ref=ref)
    return accepted, await ws.until("approval.requested", call=accepted["call"])


def test_an_always_allow_stops_applying_when_the_server_changes_the_tool(alice, bob, demo_server):
    cookie = session_cookie(bob)

    async def approve_first():
        async with Playground(cookie) as ws:
            first = await ws.call(demo_server.pk, "write_note", {"text": "1"}, approve="always_allow")
            second = await ws.call(demo_server.pk, "write_note", {"text": "2"})
            return first, second, sum(e["type"] == "approval.requested" for e in ws.seen)

    first, second, asked = run(approve_first())
    assert first["status"] == second["status"] == "succeeded" and asked == 1
    approved_fingerprint = PermissionRule.objects.get(user=bob).fingerprint

    # An admin upgrades the server; its tool now says something else.
    server = Server.objects.get(pk=demo_server.pk)
    do_update_server(server, {"env": {"DEMO_NOTE_DESCRIPTION": CHANGED}})

    async def after_the_change():
        async with Playground(cookie) as ws:
            accepted, requested = await call_and_wait_for_approval(ws, demo_server.pk, "3")
            await ws.answer(requested, "always_allow")
            third = await ws.until("call.ended", call=accepted["call"])
            fourth = await ws.call(demo_server.pk, "write_note", {"text": "4"})
            return requested, third, fourth, sum(e["type"] == "approval.requested" for e in ws.seen)

    requested, third, fourth, asked = run(after_the_change())
    assert "another definition" in requested["reason"] and requested["can_remember"]
    assert '-  "description": "Save a short note; notes live until the server stops.",' in requested["diff"]
    assert f'+  "description": "{CHANGED}",' in requested["diff"]
    assert requested["description"] == CHANGED
    # The rows the dialog shows: the old line marked removed, the new one added, in the same place.
    changed = [row for row in requested["diff_rows"] if row["kind"] in ("added", "removed")]
    assert changed == [
        {
            "kind": "removed",
            "old": 6,
            "new": None,
            "text": '  "description": "Save a short note; notes live until the server stops.",',
        },
        {"kind": "added", "old": None, "new": 6, "text": f'  "description": "{CHANGED}",'},
    ]
    assert third["status"] == fourth["status"] == "succeeded" and asked == 1
    rule = PermissionRule.objects.get(user=bob)  # renewed, not duplicated
    assert rule.fingerprint != approved_fingerprint and rule.definition["description"] == CHANGED


def test_the_worker_catches_a_change_the_portal_had_not_listed_yet(bob, demo_server):
    """The first decision uses the last tool list the portal saw; the worker decides again on the live one."""
    cookie = session_cookie(bob)

    async def approve_first():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "write_note", {"text": "1"}, approve="always_allow")

    assert run(approve_first())["status"] == "succeeded"
    # The server changes, but the portal's stored list still shows the approved definition.
    Server.objects.filter(pk=demo_server.pk).update(env={"DEMO_NOTE_DESCRIPTION": CHANGED})
    assert Server.objects.get(pk=demo_server.pk).tool("write_note")["description"] != CHANGED

    async def after_the_change():
        async with Playground(cookie) as ws:
            accepted, requested = await call_and_wait_for_approval(ws, demo_server.pk, "2")
            await ws.answer(requested, "allow_once")
            return accepted, requested, await ws.until("call.ended", call=accepted["call"])

    accepted, requested, ended = run(after_the_change())
    assert accepted["status"] == "pending"  # allowed on the stored list...
    assert f'+  "description": "{CHANGED}",' in requested["diff"]  # ...stopped by the worker on the live one
    assert ended["status"] == "succeeded"
    decided = AuditEvent.objects.filter(call_id=ended["call"]).order_by("id").values_list("kind", "decision")
    assert list(decided) == [("decision", "ask"), ("approval", "approved"), ("call", "allow")]
    # The worker refreshed the stored list, so pages now show the change too.
    assert Server.objects.get(pk=demo_server.pk).tool("write_note")["description"] == CHANGED


def test_a_diff_becomes_rows_numbered_on_both_sides():
    before = {"name": "t", "description": "old", "inputSchema": {"type": "object"}, "annotations": {"a": 1}}
    after = {**before, "description": "new", "annotations": {"a": 1, "b": 2}}
    rows = diff_rows(definition_diff(before, after))
    assert rows[0] == {"kind": "hunk", "old": None, "new": None, "text": "approved line 1, now line 1"}
    assert [(r["kind"], r["old"], r["new"], r["text"].strip()) for r in rows[1:]] == [
        ("same", 1, 1, "{"),
        ("same", 2, 2, '"annotations": {'),
        ("removed", 3, None, '"a": 1'),
        ("added", None, 3, '"a": 1,'),
        ("added", None, 4, '"b": 2'),
        ("same", 4, 5, "},"),
        ("removed", 5, None, '"description": "old",'),
        ("added", None, 6, '"description": "new",'),
        ("same", 6, 7, '"inputSchema": {'),
        ("same", 7, 8, '"type": "object"'),
        ("same", 8, 9, "},"),
    ]
    # A removed line that itself starts with "--" is not taken for the diff's header.
    assert diff_rows("--- approved\n+++ now\n@@ -1 +1 @@\n--- x\n+++ y")[1:] == [
        {"kind": "removed", "old": 1, "new": None, "text": "-- x"},
        {"kind": "added", "old": None, "new": 1, "text": "++ y"},
    ]
    assert diff_rows("") == []
