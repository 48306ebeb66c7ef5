"""The audit log: secrets redacted, append-only, who sees which rows, filters and exports."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from servers.models import PermissionRule
from sessions import actions, audit
from sessions.actions import do_start_tool_call
from sessions.models import AuditEvent
from tests.helpers import logged_in

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "value, expected",
    [
        ({"password": "p", "query": "q"}, {"password": "[redacted]", "query": "q"}),
        (
            {"API_KEY": "k", "api-key": "k", "apikey": "k"},
            {"API_KEY": "[redacted]", "api-key": "[redacted]", "apikey": "[redacted]"},
        ),
        (
            {"Authorization": "Bearer x", "github_token": "t", "clientSecret": "s"},
            {"Authorization": "[redacted]", "github_token": "[redacted]", "clientSecret": "[redacted]"},
        ),
        ({"nested": {"db": {"Password": {"deep": 1}}}}, {"nested": {"db": {"Password": "[redacted]"}}}),
        ({"items": [{"token": "t", "id": 1}, "token"]}, {"items": [{"token": "[redacted]", "id": 1}, "token"]}),
        ({"keyboard": "k", "author": "a"}, {"keyboard": "k", "author": "a"}),
        ("plain", "plain"),
    ],
)
def test_secrets_in_arguments_are_redacted_at_any_depth(value, expected):
    assert audit.redact(value) == expected


@pytest.fixture
def rows(alice, bob, carol, demo_server):
    """Rows as the actions write them: deny rules end calls at once, with no worker involved."""
    from servers.models import Server

    PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo", effect="deny")
    globex = Server.objects.create(team=carol.memberships.get().team, name="globex", command="x")
    PermissionRule.objects.create(team=globex.team, pattern="*", effect="deny")
    do_start_tool_call(bob, demo_server.pk, "echo", {"message": "hi", "auth": {"api_key": "sk-123"}})
    do_start_tool_call(alice, demo_server.pk, "crash", {})
    do_start_tool_call(carol, globex.pk, "echo", {"password": "hunter2"})
    do_start_tool_call(bob, 999999, "echo", {})  # an unknown server: no team on the row


def test_the_actions_write_a_row_per_decision_and_per_call_with_secrets_redacted(rows, bob):
    bobs = AuditEvent.objects.filter(user=bob).order_by("id")
    assert list(bobs.values_list("kind", "tool", "decision", "outcome")) == [
        ("decision", "echo", "deny", "rejected"),
        ("call", "echo", "deny", "rejected"),
        ("call", "echo", "", "rejected"),
    ]
    assert bobs[0].arguments == {"message": "hi", "auth": {"api_key": "[redacted]"}}
    assert bobs[0].rule.startswith("team rule #") and bobs[0].rule.endswith("mcp__demo (deny)")
    assert bobs[2].error == "Unknown server." and bobs[2].team is None
    assert not AuditEvent.objects.filter(arguments__icontains="sk-123").exists()
    assert "hunter2" not in json.dumps(list(AuditEvent.objects.values_list("arguments", flat=True)))


def test_the_log_is_append_only(rows):
    event = AuditEvent.objects.first()
    event.outcome = "succeeded"
    with pytest.raises(PermissionError):
        event.save()
    with pytest.raises(PermissionError):
        event.delete()
    with pytest.raises(PermissionError):
        AuditEvent.objects.filter(pk=event.pk).update(outcome="succeeded")
    with pytest.raises(PermissionError):
        AuditEvent.objects.all().delete()
    assert AuditEvent.objects.get(pk=event.pk).outcome == "rejected"


def test_admins_see_their_teams_rows_and_members_their_own(rows, alice, bob, carol):
    def usernames(user):
        return sorted({e.username for e in logged_in(user).get("/audit/").context["events"]})

    assert usernames(alice) == ["alice", "bob"]
    assert usernames(bob) == ["bob"]
    assert usernames(carol) == ["carol"]


def test_it_filters_by_user_server_tool_outcome_kind_and_date(rows, alice):
    client = logged_in(alice)

    def count(**params):
        return len(client.get("/audit/", params).context["events"])

    # Bob's two rows on Acme's server and alice's two; not bob's attempt on a server he cannot
    # see (it belongs to no team), nor anything of Globex.
    assert count() == 4
    assert count(user="bob") == 2
    assert count(tool="crash") == 2
    assert count(server="demo", kind="call") == 2
    assert count(outcome="rejected", kind="decision") == 2
    today = timezone.now().date()
    assert count(since=today.isoformat(), until=today.isoformat()) == 4
    assert count(since=(today + timedelta(days=1)).isoformat()) == 0
    assert count(until=(today - timedelta(days=1)).isoformat()) == 0
    assert count(since="not a date") == 4


def test_it_exports_csv_and_json(rows, bob):
    client = logged_in(bob)
    response = client.get("/audit/", {"format": "csv", "kind": "decision"})
    assert response["Content-Type"] == "text/csv" and "attachment" in response["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert [row["tool"] for row in table] == ["echo"]
    assert table[0]["username"] == "bob" and table[0]["decision"] == "deny" and table[0]["team"] == "Acme"
    assert json.loads(table[0]["arguments"]) == {"auth": {"api_key": "[redacted]"}, "message": "hi"}
    exported = client.get("/audit/", {"format": "json"}).json()["events"]
    assert len(exported) == 3 and {e["username"] for e in exported} == {"bob"}
    assert set(exported[0]) == set(audit.EXPORT_FIELDS)


@pytest.mark.parametrize(
    "payload",
    ['=HYPERLINK("http://evil")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1+1)*cmd|' /C calc'!A0", "\t=1+1", "\r=1+1"],
)
def test_csv_cells_that_a_spreadsheet_would_run_are_quoted(bob, payload):
    audit.record("policy", bob, tool=payload, outcome="rule_saved", error=payload)
    body = b"".join(logged_in(bob).get("/audit/", {"format": "csv"}).streaming_content).decode()
    (row,) = csv.DictReader(io.StringIO(body))
    assert row["tool"] == row["error"] == "'" + payload


def test_csv_cells_that_are_plain_text_are_left_alone(bob):
    audit.record("policy", bob, tool="echo", outcome="rule_saved", error="a = b, and 1-2")
    body = b"".join(logged_in(bob).get("/audit/", {"format": "csv"}).streaming_content).decode()
    (row,) = csv.DictReader(io.StringIO(body))
    assert (row["tool"], row["error"]) == ("echo", "a = b, and 1-2")


def test_the_django_admin_shows_the_log_read_only(rows, django_user_model):
    admin = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    client = logged_in(admin)
    assert client.get("/admin/mcp_sessions/auditevent/").status_code == 200
    assert client.get("/admin/mcp_sessions/auditevent/add/").status_code == 403
    event = AuditEvent.objects.first()
    assert client.post(f"/admin/mcp_sessions/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEvent.objects.filter(pk=event.pk).exists()


def test_rows_outlive_the_people_and_teams_they_name(rows, bob, alice):
    team = alice.memberships.get().team
    bob.delete()
    team.delete()
    kept = AuditEvent.objects.filter(username="bob").order_by("id")
    assert kept.count() == 3
    assert {(e.user_id, e.team_id) for e in kept} == {(None, None)}
    assert kept[0].server_name == "demo" and kept[0].tool == "echo"


def test_an_admin_reads_another_persons_decision_naming_that_person(alice, bob, demo_server):
    reason = "Approved (once) by you at 10:00:00: Your rule mcp__demo asks every time."
    audit.record(
        "decision", bob, team_id=demo_server.team_id, server_name="demo", tool="echo", reason=reason, outcome="allow"
    )
    audit.record("call", bob, team_id=demo_server.team_id, tool="echo", error="You cancelled the call.")
    named = "Approved (once) by bob at 10:00:00: bob's rule mcp__demo asks every time."

    page = logged_in(alice).get("/audit/").content.decode()
    assert "bob&#x27;s rule mcp__demo" in page and "by bob at" in page and "bob cancelled the call." in page
    assert "by you" not in page and "Your rule" not in page
    rows = logged_in(alice).get("/audit/", {"format": "json"}).json()["events"]
    assert {row["reason"] for row in rows} >= {named}
    assert "bob cancelled the call." in {row["error"] for row in rows}
    response = logged_in(alice).get("/audit/", {"format": "csv"})
    assert named in b"".join(response.streaming_content).decode()
    # Bob reads his own decision as it was written to him; the stored row is unchanged.
    assert reason in logged_in(bob).get("/audit/").content.decode().replace("&#x27;", "'")
    assert AuditEvent.objects.filter(reason=reason).count() == 1


def test_a_row_about_a_call_says_how_it_came_and_from_which_client(alice, bob, demo_server):
    PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo", effect="deny")
    came = actions.Came(via="mcp", client="claude-code 2.1")
    agent = do_start_tool_call(bob, demo_server.pk, "echo", {"message": "hi"}, came=came)
    played = do_start_tool_call(bob, demo_server.pk, "add", {})
    audit.record("policy", alice, team_id=demo_server.team_id, outcome="rule_saved")  # about no call

    rows = AuditEvent.objects.order_by("id")
    assert [(e.kind, str(e.call_id or ""), e.via, e.client) for e in rows] == [
        ("decision", str(agent.pk), "mcp", "claude-code 2.1"),
        ("call", str(agent.pk), "mcp", "claude-code 2.1"),
        ("decision", str(played.pk), "playground", ""),
        ("call", str(played.pk), "playground", ""),
        ("policy", "", None, ""),
    ]
    client = logged_in(alice)
    page = client.get("/audit/").content.decode()
    assert page.count("via MCP endpoint · ") == 2 and "claude-code 2.1" in page
    assert page.count("via Playground") == 2
    exported = client.get("/audit/", {"format": "json"}).json()["events"]
    assert [(e["tool"], e["via"], e["client"]) for e in exported] == [
        ("", "", ""),
        ("add", "playground", ""),
        ("add", "playground", ""),
        ("echo", "mcp", "claude-code 2.1"),
        ("echo", "mcp", "claude-code 2.1"),
    ]
    body = b"".join(client.get("/audit/", {"format": "csv", "tool": "echo"}).streaming_content).decode()
    assert [(r["via"], r["client"]) for r in csv.DictReader(io.StringIO(body))] == [("mcp", "claude-code 2.1")] * 2


def test_a_client_name_is_its_own_claim_escaped_on_the_page_and_quoted_in_the_csv(bob, demo_server):
    PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo", effect="deny")
    for name in ('=HYPERLINK("http://evil")', "<script>alert(1)</script>"):
        do_start_tool_call(bob, demo_server.pk, "echo", {}, came=actions.Came(via="mcp", client=name))
    client = logged_in(bob)
    page = client.get("/audit/").content.decode()
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    body = b"".join(client.get("/audit/", {"format": "csv"}).streaming_content).decode()
    clients = {row["client"] for row in csv.DictReader(io.StringIO(body))}
    assert clients == {'\'=HYPERLINK("http://evil")', "<script>alert(1)</script>"}
