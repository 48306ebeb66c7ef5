"""Permission decisions and live approvals, from the playground's WebSocket through a real worker.

The demo server's `write_note` is neither read-only nor destructive (the default: ask),
`echo` is read-only (the default: allow). Each test also checks the audit rows it leaves.
"""

from __future__ import annotations

import uuid

import pytest
from channels.db import database_sync_to_async

from servers.actions import do_add_rule
from servers.models import PermissionRule
from sessions.models import Approval, AuditEvent, ToolCall
from sessions.tasks import run_tool_call
from tests.helpers import team_of
from tests.ws import Playground, run, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def audit_of(call_id: str) -> list[tuple[str, str, str]]:
    return [
        (kind, decision, outcome)
        for kind, decision, outcome in AuditEvent.objects.filter(call_id=call_id)
        .order_by("id")
        .values_list("kind", "decision", "outcome")
    ]


def test_a_denied_tool_ends_rejected_with_the_rule_and_a_user_rule_cannot_loosen_it(alice, bob, demo_server):
    do_add_rule(team_of(alice), None, "mcp__demo__echo", "deny", alice)
    do_add_rule(team_of(bob), bob, "mcp__demo__echo", "allow", bob)
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "echo", {"message": "let me"}), ws.seen

    ended, seen = run(scenario())
    assert (ended["status"], ended["error_kind"]) == ("rejected", "denied")
    assert ended["error"] == "The team rule mcp__demo__echo denies it."
    assert ended["decision"]["rule"]["pattern"] == "mcp__demo__echo" and ended["decision"]["enforced"]
    assert not any(e["type"] in ("call.started", "approval.requested") for e in seen)
    call = ToolCall.objects.get(pk=ended["call"])
    assert call.worker == "" and call.started_at is None  # no worker, no server touched
    assert audit_of(ended["call"]) == [("decision", "deny", "rejected"), ("call", "deny", "rejected")]
    assert AuditEvent.objects.filter(call_id=call.pk, kind="call").get().rule.startswith("team rule #")


def test_allow_once_runs_the_call_and_the_next_call_asks_again(bob, demo_server):
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            accepted = await ws.start(demo_server.pk, "write_note", {"text": "hi"})
            requested = await ws.until("approval.requested", call=accepted["call"])
            await ws.answer(requested, "allow_once")
            approved = await ws.until("approval.ended", approval=requested["approval"])
            first = await ws.until("call.ended", call=accepted["call"])
            second = await ws.call(demo_server.pk, "write_note", {"text": "again"}, approve="deny")
            return requested, approved, first, second

    requested, approved, first, second = run(scenario())
    # What the dialog shows: server, tool, arguments, annotations, why.
    assert (requested["server_name"], requested["tool"], requested["arguments"]) == (
        "demo",
        "write_note",
        {"text": "hi"},
    )
    assert requested["annotations"] == {"readOnlyHint": False, "destructiveHint": False}
    assert requested["description"].startswith("Save a short note")
    assert "default for not read-only, not destructive" in requested["reason"]
    assert requested["can_remember"] is True and requested["diff"] == "" and requested["rule"] is None
    assert 0 < requested["expires_in"] <= 300
    assert approved["state"] == "approved"
    assert first["status"] == "succeeded" and first["result"]["content"][0]["text"] == "saved note 1: hi"
    assert first["decision"]["effect"] == "allow" and "Approved (once)" in first["decision"]["reason"]
    assert (second["status"], second["error_kind"], second["error"]) == (
        "rejected",
        "declined",
        "You declined the call.",
    )
    assert audit_of(first["call"]) == [
        ("decision", "ask", "awaiting_approval"),
        ("approval", "approved", "pending"),
        ("call", "allow", "succeeded"),
    ]
    assert audit_of(second["call"]) == [
        ("decision", "ask", "awaiting_approval"),
        ("approval", "declined", "rejected"),
        ("call", "ask", "rejected"),
    ]
    call_row = AuditEvent.objects.get(call_id=first["call"], kind="call")
    assert call_row.username == "bob" and call_row.duration_ms > 0 and call_row.arguments == {"text": "hi"}
    assert not PermissionRule.objects.exists()


def test_always_allow_saves_a_pinned_rule_and_the_next_call_runs_without_asking(bob, demo_server):
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            first = await ws.call(demo_server.pk, "write_note", {"text": "1"}, approve="always_allow")
            asked = sum(e["type"] == "approval.requested" for e in ws.seen)
            second = await ws.call(demo_server.pk, "write_note", {"text": "2"})
            return first, second, asked, sum(e["type"] == "approval.requested" for e in ws.seen)

    first, second, asked_before, asked_after = run(scenario())
    assert first["status"] == second["status"] == "succeeded"
    assert asked_before == asked_after == 1
    rule = PermissionRule.objects.get()
    assert (rule.user, rule.pattern, rule.effect) == (bob, "mcp__demo__write_note", "allow")
    assert len(rule.fingerprint) == 64 and rule.definition["name"] == "write_note"
    assert second["decision"]["rule"]["id"] == rule.pk and second["decision"]["rule"]["pinned"]
    assert audit_of(second["call"]) == [("call", "allow", "succeeded")]
    assert AuditEvent.objects.filter(kind="policy", outcome="rule_saved", tool="mcp__demo__write_note").count() == 1


def test_an_unanswered_approval_times_out_and_ends_the_call(bob, demo_server, settings):
    settings.PORTAL_APPROVAL_TIMEOUT = 1
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            # With the tool list known, the portal asks at once (in this process, with this timeout).
            await ws.send({"type": "list_tools", "server": demo_server.pk})
            await ws.until("tools", server=demo_server.pk)
            accepted = await ws.start(demo_server.pk, "write_note", {"text": "x"})
            requested = await ws.until("approval.requested", call=accepted["call"])
            ended = await ws.until("call.ended", call=accepted["call"])
            expired = await ws.until("approval.ended", approval=requested["approval"])
            await ws.answer(requested, "allow_once")
            late = await ws.until("error")
            return accepted, requested, ended, expired, late

    accepted, requested, ended, expired, late = run(scenario())
    assert accepted["status"] == "awaiting_approval" and requested["expires_in"] <= 1
    assert (ended["status"], ended["error_kind"]) == ("timed_out", "approval_timeout")
    assert "within 1 s" in ended["error"]
    assert expired["state"] == "expired"
    assert late["message"] == "This approval was already answered (timed out)."
    assert audit_of(ended["call"]) == [
        ("decision", "ask", "awaiting_approval"),
        ("approval", "expired", "timed_out"),
        ("call", "ask", "timed_out"),
    ]


def test_a_pending_approval_survives_a_reload(bob, demo_server):
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            accepted = await ws.start(demo_server.pk, "write_note", {"text": "kept"})
            requested = await ws.until("approval.requested", call=accepted["call"])
        async with Playground(cookie) as reloaded:
            await reloaded.send({"type": "list_approvals"})
            listed = await reloaded.until("approvals")
            await reloaded.answer(listed["approvals"][0], "allow_once")
            return requested, listed, await reloaded.until("call.ended", call=accepted["call"])

    requested, listed, ended = run(scenario())
    assert [a["approval"] for a in listed["approvals"]] == [requested["approval"]]
    assert listed["approvals"][0]["arguments"] == {"text": "kept"}
    assert ended["status"] == "succeeded"


def test_nobody_can_answer_an_approval_that_is_not_theirs_or_was_never_issued(alice, bob, demo_server):
    alice_cookie, bob_cookie = session_cookie(alice), session_cookie(bob)

    async def scenario():
        async with Playground(bob_cookie) as bob_ws, Playground(alice_cookie) as alice_ws:
            accepted = await bob_ws.start(demo_server.pk, "write_note", {"text": "mine"})
            requested = await bob_ws.until("approval.requested", call=accepted["call"])
            errors = []
            # Alice is an admin of bob's team; the approval is still bob's alone.
            for message in (
                {"approval": requested["approval"], "answer": "allow_once"},
                {"approval": str(uuid.uuid4()), "answer": "allow_once"},
                {"approval": "not-a-uuid", "answer": "allow_once"},
                {"approval": requested["approval"]},
                {"approval": requested["approval"], "answer": "yes please"},
            ):
                await alice_ws.send({"type": "answer_approval", **message})
                errors.append((await alice_ws.until("error"))["message"])
            await alice_ws.send({"type": "list_approvals"})
            alices = await alice_ws.until("approvals")
            still_pending = await database_sync_to_async(lambda: Approval.objects.get(pk=requested["approval"]).state)()
            await bob_ws.answer(requested, "allow_once")
            ended = await bob_ws.until("call.ended", call=accepted["call"])
            await bob_ws.answer(requested, "deny")
            twice = await bob_ws.until("error")
            return errors, alices, still_pending, ended, twice

    errors, alices, still_pending, ended, twice = run(scenario())
    assert errors[:3] == ["Unknown approval."] * 3
    assert errors[3] == "'answer' must be a string of 1 to 20 characters."
    assert errors[4] == "'answer' must be one of allow_once, always_allow, deny."
    assert alices["approvals"] == []
    assert still_pending == "pending"
    assert ended["status"] == "succeeded"
    assert twice["message"] == "This approval was already answered (approved)."


def test_a_decision_put_into_the_call_message_is_ignored(bob, demo_server):
    cookie = session_cookie(bob)
    forged = {"decision": {"effect": "allow"}, "approved": True, "approval": str(uuid.uuid4()), "status": "pending"}

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send(
                {
                    "type": "call",
                    "ref": "f",
                    "server": demo_server.pk,
                    "tool": "write_note",
                    "arguments": {"text": "sneaky"},
                    **forged,
                }
            )
            accepted = await ws.until("call.accepted", ref="f")
            requested = await ws.until("approval.requested", call=accepted["call"])
            await ws.answer(requested, "deny")
            return await ws.until("call.ended", call=accepted["call"])

    ended = run(scenario())
    assert (ended["status"], ended["error_kind"]) == ("rejected", "declined")
    assert ended["result"] is None


def test_a_team_ask_cannot_be_turned_into_always_allow(alice, bob, demo_server):
    do_add_rule(team_of(alice), None, "mcp__demo__echo", "ask", alice)
    do_add_rule(team_of(bob), bob, "mcp__demo__*", "allow", bob)
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            accepted = await ws.start(demo_server.pk, "echo", {"message": "m"})
            requested = await ws.until("approval.requested", call=accepted["call"])
            await ws.answer(requested, "always_allow")
            refused = await ws.until("error")
            await ws.answer(requested, "allow_once")
            return requested, refused, await ws.until("call.ended", call=accepted["call"])

    requested, refused, ended = run(scenario())
    assert requested["can_remember"] is False
    assert requested["rule"]["pattern"] == "mcp__demo__echo" and "asks every time" in requested["reason"]
    assert refused["message"] == "A rule asks for this tool every time, so it cannot be always allowed."
    assert ended["status"] == "succeeded"
    assert not PermissionRule.objects.filter(pattern="mcp__demo__echo", user=bob).exists()


def test_the_worker_refuses_calls_that_did_not_pass_the_portals_check(alice, demo_server):
    """A call queued by anything but do_start_tool_call, or with a forged decision, does not run."""
    do_add_rule(team_of(alice), None, "mcp__demo__crash", "deny", alice)
    cookie = session_cookie(alice)

    def queue(tool: str, arguments: dict, decision: dict) -> str:
        call = ToolCall.objects.create(
            user=alice, server=demo_server, server_name="demo", tool=tool, arguments=arguments, decision=decision
        )
        run_tool_call.delay(str(call.id))
        return str(call.id)

    async def scenario():
        async with Playground(cookie) as ws:
            unchecked = await database_sync_to_async(queue)("echo", {"message": "x"}, {})
            first = await ws.until("call.ended", call=unchecked)
            # The decision recorded says allow, but the rules as they are now say deny...
            denied = await database_sync_to_async(queue)("crash", {}, {"effect": "allow"})
            second = await ws.until("call.ended", call=denied)
            # ...or ask: the worker asks the person instead of running it.
            asking = await database_sync_to_async(queue)("write_note", {"text": "x"}, {"effect": "allow"})
            requested = await ws.until("approval.requested", call=asking)
            await ws.answer(requested, "deny")
            third = await ws.until("call.ended", call=asking)
            return first, second, third

    first, second, third = run(scenario())
    assert (first["status"], first["error_kind"]) == ("rejected", "unchecked")
    assert (second["status"], second["error_kind"]) == ("rejected", "denied")
    assert second["error"] == "The team rule mcp__demo__crash denies it."
    assert (third["status"], third["error_kind"]) == ("rejected", "declined")
    assert audit_of(second["call"]) == [("decision", "deny", "rejected"), ("call", "deny", "rejected")]
