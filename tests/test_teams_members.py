"""Running a team from its page: create, rename, delete; change roles, remove, leave; the last admin stays."""

from __future__ import annotations

import pytest

from servers.models import Membership, Server, Team
from sessions.models import AuditEvent
from tests.teams import TeamPages, membership

pytestmark = pytest.mark.django_db


def _outcomes() -> list[str]:
    return list(AuditEvent.objects.filter(kind="membership").order_by("id").values_list("outcome", flat=True))


def test_anyone_creates_a_team_and_becomes_its_admin(make_user):
    dana = make_user("dana", team=None)
    created = TeamPages(dana).create("Initech")
    team = Team.objects.get(name="Initech")
    assert created.status_code == 302 and membership(dana, team).role == "admin"
    assert "Initech" in TeamPages(dana).client.get("/teams/").content.decode()
    assert "already" in TeamPages(dana).create("Initech").content.decode()


def test_an_admin_renames_and_deletes_after_a_confirmation_listing_what_goes(alice, demo_server):
    pages, team = TeamPages(alice), demo_server.team
    pages.client.post(f"/teams/{team.pk}/rename/", {"name": "Acme Corp"})
    assert Team.objects.get(pk=team.pk).name == "Acme Corp"
    confirm = pages.client.get(f"/teams/{team.pk}/delete/").content.decode()
    assert "1 server" in confirm and "demo" in confirm
    pages.client.post(f"/teams/{team.pk}/delete/")
    assert not Team.objects.filter(pk=team.pk).exists() and not Server.objects.exists()
    assert AuditEvent.objects.filter(outcome="team_deleted").exists()


def test_the_page_lists_members_with_roles(alice, bob):
    page = TeamPages(bob).client.get(f"/teams/{membership(bob, 'Acme').team_id}/").content.decode()
    assert "alice" in page and "bob" in page and "Member" in page
    assert "Invite a colleague" not in page  # a member's page has no invite form


def test_an_admin_changes_a_role_and_removes_a_member(alice, bob, make_user):
    carl = make_user("carl")
    pages = TeamPages(alice)
    pages.set_role(membership(bob, "Acme"), "admin")
    assert membership(bob, "Acme").role == "admin"
    pages.remove(membership(carl, "Acme"))
    assert membership(carl, "Acme") is None
    assert _outcomes() == ["role_changed", "removed"]


def test_a_member_cannot_change_roles_or_remove(alice, bob):
    pages = TeamPages(bob)
    refused = pages.set_role(membership(alice, "Acme"), "member").content.decode()
    assert "Only the team&#x27;s admins" in refused
    assert pages.set_role(membership(bob, "Acme"), "admin") and membership(bob, "Acme").role == "member"
    pages.remove(membership(alice, "Acme"))
    assert membership(alice, "Acme").role == "admin" and _outcomes() == []


def test_the_last_admin_cannot_leave_nor_be_demoted(alice, bob):
    pages = TeamPages(alice)
    assert "A team needs an admin" in pages.leave(membership(alice, "Acme").team).content.decode()
    assert "A team needs an admin" in pages.set_role(membership(alice, "Acme"), "member").content.decode()
    assert membership(alice, "Acme").role == "admin"
    # With a second admin, the first may step down, and then leave.
    pages.set_role(membership(bob, "Acme"), "admin")
    pages.set_role(membership(alice, "Acme"), "member")
    assert membership(alice, "Acme").role == "member"
    pages.leave(membership(bob, "Acme").team)
    assert membership(alice, "Acme") is None
    assert _outcomes() == ["role_changed", "role_changed", "left"]


def test_a_member_leaves(alice, bob):
    TeamPages(bob).leave(membership(bob, "Acme").team)
    assert membership(bob, "Acme") is None and _outcomes() == ["left"]


def test_a_removed_members_records_stay_marked_former_member(alice, bob, demo_server):
    from servers.actions import do_add_rule
    from sessions.actions import do_start_tool_call

    do_add_rule(demo_server.team, None, "mcp__demo__nope", "deny", alice)
    do_start_tool_call(bob, demo_server.pk, "nope", {})  # a call record and audit rows of bob's, denied
    TeamPages(alice).remove(membership(bob, "Acme"))
    log = TeamPages(alice).client.get("/audit/").content.decode()
    assert "former member" in log
    assert Membership.objects.filter(user=bob).count() == 0
    assert bob.tool_calls.count() == 1
