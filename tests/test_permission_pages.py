"""The permission pages: your rules, the team's policy (admins change it), and each tool's decision and why."""

from __future__ import annotations

import pytest

from servers.models import PermissionRule, TeamPolicy
from sessions.models import AuditEvent
from tests.helpers import logged_in

pytestmark = pytest.mark.django_db

TOOLS = [
    {"name": "echo", "description": "Echo back.", "annotations": {"readOnlyHint": True}, "inputSchema": {}},
    {
        "name": "write_note",
        "description": "Save a note.",
        "annotations": {"readOnlyHint": False, "destructiveHint": False},
        "inputSchema": {},
    },
    {"name": "crash", "description": "Exit.", "annotations": {"destructiveHint": True}, "inputSchema": {}},
]


@pytest.fixture
def listed_server(demo_server):
    demo_server.tools = TOOLS
    demo_server.save()
    return demo_server


def test_a_member_adds_and_deletes_their_own_rules(bob):
    client = logged_in(bob)
    response = client.post(
        "/servers/rules/", {"team": bob.memberships.get().team_id, "pattern": "mcp__demo__*", "effect": "deny"}
    )
    assert response.status_code == 302
    rule = PermissionRule.objects.get()
    assert (rule.user, rule.team.name, rule.pattern, rule.effect, rule.fingerprint) == (
        bob,
        "Acme",
        "mcp__demo__*",
        "deny",
        "",
    )
    page = client.get("/servers/rules/").content.decode()
    assert "mcp__demo__*" in page and "Deny" in page
    bad = client.post("/servers/rules/", {"team": rule.team_id, "pattern": "demo echo", "effect": "allow"})
    assert "Write mcp__&lt;server&gt; or mcp__&lt;server&gt;__&lt;tool&gt;" in bad.content.decode()
    assert client.post(f"/servers/rules/{rule.pk}/delete/").status_code == 302
    assert not PermissionRule.objects.exists()
    assert list(AuditEvent.objects.order_by("id").values_list("kind", "outcome", "tool")) == [
        ("policy", "rule_saved", "mcp__demo__*"),
        ("policy", "rule_deleted", "mcp__demo__*"),
    ]


def test_nobody_deletes_a_rule_that_is_not_theirs_to_change(alice, bob):
    team = alice.memberships.get().team
    alices = PermissionRule.objects.create(team=team, user=alice, pattern="mcp__demo", effect="allow")
    teams = PermissionRule.objects.create(team=team, pattern="mcp__demo__crash", effect="deny")
    client = logged_in(bob)
    assert client.post(f"/servers/rules/{alices.pk}/delete/").status_code == 404
    assert client.post(f"/servers/rules/{teams.pk}/delete/").status_code == 404
    assert PermissionRule.objects.count() == 2
    assert logged_in(alice).post(f"/servers/rules/{teams.pk}/delete/").status_code == 302


def test_members_read_the_team_policy_and_admins_change_it(alice, bob, carol):
    team = alice.memberships.get().team
    url = f"/servers/teams/{team.pk}/policy/"
    assert logged_in(bob).get(url).status_code == 200
    assert logged_in(bob).post(url, {"form": "rule", "pattern": "mcp__x", "effect": "allow"}).status_code == 403
    assert logged_in(carol).get(url).status_code == 404
    admin = logged_in(alice)
    assert (
        admin.post(url, {"form": "rule", "team": team.pk, "pattern": "mcp__demo__crash", "effect": "deny"}).status_code
        == 302
    )
    rule = PermissionRule.objects.get()
    assert (rule.user, rule.pattern, rule.effect, rule.created_by) == (None, "mcp__demo__crash", "deny", alice)
    defaults = {"form": "defaults", "read_only": "ask", "destructive": "deny", "other": "allow"}
    assert admin.post(url, defaults).status_code == 302
    policy = TeamPolicy.objects.get(team=team)
    assert (policy.read_only, policy.destructive, policy.other) == ("ask", "deny", "allow")
    page = logged_in(bob).get(url).content.decode()
    assert "mcp__demo__crash" in page and "Ask every time" in page
    outcomes = list(AuditEvent.objects.order_by("id").values_list("username", "outcome"))
    assert outcomes == [("alice", "rule_saved"), ("alice", "defaults_saved")]


def test_the_server_page_shows_each_tools_decision_for_the_viewer_and_why(alice, bob, listed_server):
    PermissionRule.objects.create(team=listed_server.team, pattern="mcp__demo__crash", effect="deny")
    PermissionRule.objects.create(team=listed_server.team, user=bob, pattern="mcp__demo__write_note", effect="allow")
    tools = {t["name"]: t for t in logged_in(bob).get(f"/servers/{listed_server.pk}/").context["tools"]}
    assert tools["echo"]["decision"]["effect"] == "allow"
    assert "default for read-only" in tools["echo"]["decision"]["reason"]
    assert tools["write_note"]["decision"]["reason"] == "Your rule mcp__demo__write_note allows it."
    assert tools["crash"]["decision"]["reason"] == "The team rule mcp__demo__crash denies it."
    assert [tools[name]["class"] for name in ("echo", "write_note", "crash")] == ["read", "write", "write"]
    # Alice has no rule of her own: the default asks her.
    alices = {t["name"]: t for t in logged_in(alice).get(f"/servers/{listed_server.pk}/").context["tools"]}
    assert alices["write_note"]["decision"]["effect"] == "ask"
    page = logged_in(bob).get(f"/servers/{listed_server.pk}/").content.decode()
    assert "The team rule mcp__demo__crash denies it." in page


def test_an_admin_allows_a_tool_for_the_team_and_approves_it_again_after_it_changes(alice, bob, listed_server):
    url = f"/servers/{listed_server.pk}/pin/"
    assert logged_in(bob).post(url, {"tool": "write_note", "scope": "team"}).status_code == 403
    assert logged_in(alice).post(url, {"tool": "write_note", "scope": "team"}).status_code == 302
    rule = PermissionRule.objects.get()
    assert rule.user is None and rule.fingerprint and rule.definition["description"] == "Save a note."
    detail = f"/servers/{listed_server.pk}/"
    assert {t["name"]: t for t in logged_in(bob).get(detail).context["tools"]}["write_note"]["decision"][
        "effect"
    ] == "allow"

    # The server now describes the tool differently: the team's approval no longer covers it.
    listed_server.tools = [
        dict(t, description="Save a note and publish it.") if t["name"] == "write_note" else t for t in TOOLS
    ]
    listed_server.save()
    note = {t["name"]: t for t in logged_in(bob).get(detail).context["tools"]}["write_note"]
    assert note["decision"]["effect"] == "ask"
    [change] = note["changes"]
    assert change["rule"]["scope"] == "team"
    assert '-  "description": "Save a note.",' in change["diff"]
    assert '+  "description": "Save a note and publish it.",' in change["diff"]
    assert "Approve the new definition for the team" in logged_in(alice).get(detail).content.decode()
    assert logged_in(alice).post(url, {"tool": "write_note", "scope": "team"}).status_code == 302
    assert PermissionRule.objects.get().definition["description"] == "Save a note and publish it."
    assert {t["name"]: t for t in logged_in(bob).get(detail).context["tools"]}["write_note"]["decision"][
        "effect"
    ] == "allow"


def test_a_member_pins_a_tool_for_themselves_only_from_the_current_list(bob, listed_server):
    url = f"/servers/{listed_server.pk}/pin/"
    assert logged_in(bob).post(url, {"tool": "crash", "scope": "user"}).status_code == 302
    rule = PermissionRule.objects.get()
    assert (rule.user, rule.pattern, rule.effect) == (bob, "mcp__demo__crash", "allow") and rule.fingerprint
    logged_in(bob).post(url, {"tool": "not_listed", "scope": "user"})
    assert PermissionRule.objects.count() == 1


def test_the_playground_catalog_carries_classes_and_decisions(bob, listed_server):
    catalog = logged_in(bob).get("/playground/").context["catalog"]
    described = catalog[0]["described"]
    assert described["echo"]["class"] == "read" and described["echo"]["decision"]["effect"] == "allow"
    assert described["crash"]["decision"]["effect"] == "ask" and described["crash"]["decision"]["can_remember"]


def test_a_member_refused_an_admin_page_gets_a_page_with_the_reason_and_no_traceback_is_logged(bob, caplog):
    caplog.set_level("WARNING", logger="django.request")
    response = logged_in(bob).get("/servers/add/")
    assert response.status_code == 403
    page = response.content.decode()
    assert "Only team admins can register servers." in page
    assert 'aria-label="Main"' in page and "portal.css" in page, "the portal's own page, not a bare 403"
    refusals = [r for r in caplog.records if r.name == "django.request" and r.levelname == "WARNING"]
    assert refusals and "Forbidden" in refusals[0].getMessage()
    assert all(r.exc_info is None for r in refusals), "a refusal is not an error: no traceback"
    assert "Traceback" not in caplog.text
