"""An auditor reads the team's audit log and call records; members read only their own."""

from __future__ import annotations

import pytest

from servers.actions import do_add_rule
from sessions.actions import do_start_tool_call
from tests.teams import TeamPages, membership

pytestmark = pytest.mark.django_db


def test_an_auditor_reads_the_teams_calls_and_audit_rows_and_a_member_does_not(alice, bob, make_user, demo_server):
    auditor = make_user("audrey", role="auditor")
    do_add_rule(demo_server.team, None, "mcp__demo__echo", "deny", alice)
    call = do_start_tool_call(bob, demo_server.pk, "echo", {"message": "bob's words"})
    dana = make_user("dana")

    reader = TeamPages(auditor).client
    history = reader.get("/calls/").content.decode()
    assert "bob" in history and "echo" in history
    assert reader.get(f"/calls/{call.pk}/").status_code == 200
    assert "bob&#x27;s words" in reader.get("/audit/").content.decode()

    other = TeamPages(dana).client
    assert other.get(f"/calls/{call.pk}/").status_code == 404
    assert "bob&#x27;s words" not in other.get("/audit/").content.decode()
    # The full output and the export stay their owner's.
    assert reader.get(f"/calls/{call.pk}/export.json").status_code == 404


def test_a_former_members_calls_stay_readable_and_marked(alice, bob, make_user, demo_server):
    auditor = make_user("audrey", role="auditor")
    do_add_rule(demo_server.team, None, "mcp__demo__echo", "deny", alice)
    do_start_tool_call(bob, demo_server.pk, "echo", {"message": "before leaving"})
    TeamPages(alice).remove(membership(bob, "Acme"))
    history = TeamPages(auditor).client.get("/calls/").content.decode()
    assert "former member" in history
