"""The approvals inbox without JavaScript: the person's own waiting calls, answered by its forms, and
the navigation's count on every page.

Calls are started by the real action (sessions.actions.do_start_tool_call) from the server's last
tool list, as the playground and the MCP endpoint start them; nothing runs them (no worker here, and
the test's transaction never commits), so an approved call stays pending.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from servers.actions import do_add_rule
from servers.models import PermissionRule, Server
from servers.policy import tool_fingerprint
from sessions.actions import Came, do_start_tool_call
from sessions.models import Approval, ToolCall, Via
from tests.conftest import DEMO_ARGS, DEMO_COMMAND, ROOT
from tests.helpers import logged_in, team_of

pytestmark = pytest.mark.django_db

WRITE_NOTE = {
    "name": "write_note",
    "description": "Save a short note.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    "annotations": {"readOnlyHint": False, "destructiveHint": False},
}
AGENT = Came(via=Via.MCP, client="claude-code 2.1.0")


def server_of(owner, name: str = "demo") -> Server:
    return Server.objects.create(
        team=team_of(owner),
        name=name,
        transport="stdio",
        command=DEMO_COMMAND,
        args=DEMO_ARGS,
        cwd=str(ROOT),
        created_by=owner,
        tools=[WRITE_NOTE],
    )


def ask(user, server: Server, text: str, came: Came | None = None) -> Approval:
    call = do_start_tool_call(user, server.pk, "write_note", {"text": text}, came=came)
    assert call.status == "awaiting_approval", (call.status, call.error)
    return call.approvals.get()


@pytest.fixture
def demo(alice) -> Server:
    return server_of(alice)


def count_in_nav(html: str) -> tuple[str, bool]:
    found = re.search(r'<span class="badge count" id="approvals-count"( hidden)?><span data-count>(\d+)</span>', html)
    assert found, "no count in the navigation"
    return found.group(2), found.group(1) is None


def test_it_lists_only_the_persons_own_waiting_calls(alice, bob, carol, demo):
    ask(alice, demo, "alice's note", came=AGENT)
    ask(bob, demo, "bob's note")  # the same team and server
    ask(carol, server_of(carol, "globex"), "carol's note")  # another team

    page = logged_in(alice).get("/approvals/").content.decode()

    assert "alice&#x27;s note" in page
    assert "bob&#x27;s note" not in page and "carol&#x27;s note" not in page
    assert page.count('class="card approval-card"') == 1


def test_a_card_says_who_asked_what_and_why(alice, demo):
    ask(alice, demo, "<script>alert(1)</script>", came=AGENT)
    ask(alice, demo, "from the page")

    page = logged_in(alice).get("/approvals/").content.decode()

    assert page.count('class="card approval-card"') == 2
    assert '<span class="asked-by">claude-code 2.1.0</span> asks to run <span class="server">demo</span>' in page
    assert '<span class="asked-by">Playground</span> asks to run' in page
    # The arguments as pretty JSON, escaped.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "{\n  &quot;text&quot;: &quot;from the page&quot;\n}" in page
    assert "readOnlyHint: false, destructiveHint: false" in page
    assert "default for not read-only, not destructive" in page  # which rule asked
    assert re.search(r'data-deadline="[^"]+">\d+ s, then the call ends as timed out', page)
    assert page.count('value="always_allow">Always allow') == 2
    # Two calls of one tool wait: one button allows both once.
    assert re.search(
        r'<input type="hidden" name="approval" value="[0-9a-f-]+">\s*<input type="hidden" name="approval"', page
    )
    assert 'value="allow_once">Allow all 2 once</button>' in page


def test_always_allow_is_not_offered_when_a_rule_asks_every_time(alice, demo):
    do_add_rule(team_of(alice), None, "mcp__demo__write_note", "ask", alice)
    ask(alice, demo, "ask me always")

    page = logged_in(alice).get("/approvals/").content.decode()

    assert "Allow once" in page and "Always allow" not in page
    assert "mcp__demo__write_note" in page


def test_allow_once_without_javascript_queues_the_call(alice, demo):
    approval = ask(alice, demo, "go")

    answered = logged_in(alice).post(
        "/approvals/answer", {"approval": approval.pk, "answer": "allow_once"}, follow=True
    )

    assert answered.redirect_chain == [("/approvals/", 302)]
    assert "Allowed once: demo · write_note." in answered.content.decode()
    assert ToolCall.objects.get(pk=approval.call_id).status == "pending"
    approval.refresh_from_db()
    assert approval.state == "approved" and not approval.remember
    assert "Nothing waits for your approval." in answered.content.decode()


def test_deny_without_javascript_ends_the_call_rejected(alice, demo):
    approval = ask(alice, demo, "no")

    logged_in(alice).post("/approvals/answer", {"approval": approval.pk, "answer": "deny"})

    call = ToolCall.objects.get(pk=approval.call_id)
    assert (call.status, call.error_kind) == ("rejected", "declined")


def test_allow_all_once_answers_each_waiting_call(alice, demo):
    first, second = ask(alice, demo, "one"), ask(alice, demo, "two")

    page = logged_in(alice).post(
        "/approvals/answer", {"approval": [first.pk, second.pk], "answer": "allow_once"}, follow=True
    )

    assert "Allowed once: 2 calls." in page.content.decode()
    assert set(ToolCall.objects.values_list("status", flat=True)) == {"pending"}


@pytest.mark.parametrize("whose", ["bob", "carol"])
def test_an_answer_to_another_persons_approval_is_unknown_and_changes_nothing(alice, bob, carol, demo, whose):
    other = {"bob": bob, "carol": carol}[whose]
    theirs = ask(other, demo if whose == "bob" else server_of(carol, "globex"), "theirs")

    for answer in ("allow_once", "deny"):
        page = logged_in(alice).post("/approvals/answer", {"approval": theirs.pk, "answer": answer}, follow=True)
        assert "Unknown approval." in page.content.decode()

    theirs.refresh_from_db()
    assert theirs.state == "pending"
    assert ToolCall.objects.get(pk=theirs.call_id).status == "awaiting_approval"


def test_the_inbox_needs_a_login_and_answers_only_by_post(alice, demo):
    approval = ask(alice, demo, "x")
    assert logged_in(alice).get("/approvals/answer").status_code == 405
    assert Client().get("/approvals/").status_code == 302
    Client().post("/approvals/answer", {"approval": approval.pk, "answer": "allow_once"})
    approval.refresh_from_db()
    assert approval.state == "pending"


def test_the_nav_counts_the_persons_waiting_calls_on_every_page(alice, bob, demo):
    client = logged_in(alice)
    assert count_in_nav(client.get("/calls/").content.decode()) == ("0", False)  # hidden when 0

    ask(alice, demo, "one")
    ask(alice, demo, "two")
    ask(bob, demo, "not alice's")

    for path in ("/calls/", "/servers/", "/approvals/"):
        assert count_in_nav(client.get(path).content.decode()) == ("2", True), path


def test_the_count_costs_one_query(alice, demo):
    ask(alice, demo, "one")
    client = logged_in(alice)
    with CaptureQueriesContext(connection) as queries:
        client.get("/calls/")
    on_approvals = [q["sql"] for q in queries if "mcp_sessions_approval" in q["sql"]]
    assert len(on_approvals) == 1 and "COUNT(" in on_approvals[0].upper()


def changed_since_always_allowed(user, server: Server) -> None:
    """The person always allowed write_note as it was; the server's list now says more."""
    before = {**WRITE_NOTE, "description": "Save a short note."}
    PermissionRule.objects.create(
        team=server.team,
        user=user,
        pattern="mcp__demo__write_note",
        effect="allow",
        fingerprint=tool_fingerprint(before),
        definition=before,
        created_by=user,
    )
    server.tools = [{**WRITE_NOTE, "description": "Save a short note, and mail it to everyone you know."}]
    server.save(update_fields=["tools"])


def test_a_card_shows_what_changed_since_the_tool_was_always_allowed(alice, demo):
    changed_since_always_allowed(alice, demo)
    ask(alice, demo, "diffed", came=AGENT)

    page = logged_in(alice).get("/approvals/").content.decode()

    assert "The tool changed since you approved it" in page
    assert re.search(r'<tr class="diff-removed">.*Save a short note\.', page)
    assert re.search(r'<tr class="diff-added">.*mail it to everyone you know', page)


def test_the_approval_event_says_how_the_call_came(alice, demo):
    by_agent = ask(alice, demo, "agent", came=AGENT).as_event()
    by_page = ask(alice, demo, "page").as_event()

    assert (by_agent["via"], by_agent["client"]) == ("mcp", "claude-code 2.1.0")
    assert (by_page["via"], by_page["client"]) == ("playground", "")


def test_an_answer_without_the_pages_csrf_token_is_refused(alice, demo):
    approval = ask(alice, demo, "forged")

    forged = logged_in(alice, enforce_csrf_checks=True).post(
        "/approvals/answer", {"approval": approval.pk, "answer": "allow_once"}
    )

    assert forged.status_code == 403
    approval.refresh_from_db()
    assert approval.state == "pending"
