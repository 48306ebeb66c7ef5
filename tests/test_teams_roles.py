"""Who may do what in a team: the table of servers/roles.py, over every role and action."""

from __future__ import annotations

import itertools

import pytest

from servers.models import Role
from servers.roles import ALLOWED, LAST_ADMIN, TeamAction, TeamRole, may, membership_change_error, roles_that_may

ROLES = [None, *TeamRole]

# Written out again, by hand, as the issue states the roles: a change to the table must change this too.
EXPECTED = {
    TeamAction.USE_SERVERS: {"admin", "member"},
    TeamAction.SEE_SERVERS: {"admin", "member", "auditor"},
    TeamAction.MANAGE_SERVERS: {"admin"},
    TeamAction.MANAGE_POLICY: {"admin"},
    TeamAction.MANAGE_TEAM_CREDENTIALS: {"admin"},
    TeamAction.OWN_CREDENTIALS: {"admin", "member"},
    TeamAction.MANAGE_MEMBERS: {"admin"},
    TeamAction.SEE_MEMBERS: {"admin", "member", "auditor"},
    TeamAction.READ_TEAM_AUDIT: {"admin", "auditor"},
    TeamAction.READ_TEAM_CALLS: {"auditor"},
}


def test_every_action_has_a_row_and_the_model_knows_every_role():
    assert set(ALLOWED) == set(TeamAction) == set(EXPECTED)
    assert set(Role.values) == {role.value for role in TeamRole}


@pytest.mark.parametrize(("role", "action"), list(itertools.product(ROLES, TeamAction)))
def test_may(role, action):
    assert may(role, action) is (role is not None and role in EXPECTED[action])
    assert may(role.value if role else None, action) is may(role, action)


def test_an_auditor_never_calls_nor_touches_secrets():
    for action in (TeamAction.USE_SERVERS, TeamAction.MANAGE_TEAM_CREDENTIALS, TeamAction.OWN_CREDENTIALS):
        assert not may("auditor", action)


def test_roles_that_may_reads_the_same_table():
    for action in TeamAction:
        assert set(roles_that_may(action)) == EXPECTED[action]


def _expected_change(actor, is_self, target, new, admins):
    leaving = is_self and new is None
    if leaving:
        if actor is None:
            return "Only"
    elif actor != "admin":
        return "Only"
    if target == "admin" and new != "admin" and admins <= 1:
        return LAST_ADMIN
    return ""


@pytest.mark.parametrize(
    ("actor", "is_self", "target", "new", "admins"),
    list(itertools.product(ROLES, [True, False], list(TeamRole), [None, *TeamRole], [1, 2])),
)
def test_membership_change_error(actor, is_self, target, new, admins):
    error = membership_change_error(actor, is_self, target, new, admins)
    expected = _expected_change(actor, is_self, target, new, admins)
    if expected == "Only":
        assert error.startswith("Only the team's admins")
    else:
        assert error == expected


def test_an_unknown_role_is_refused():
    assert membership_change_error("admin", False, "member", "owner", 2) == "Unknown role."
