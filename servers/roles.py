"""Who may do what in a team: one pure decision over a role and an action, written as a table.

No Django here: servers/permissions.py loads the person's role in the team and asks `may()`;
querysets ask `roles_that_may()`, read from the same table. tests/test_teams_roles.py walks
every (role, action) pair and every membership change.
"""

from __future__ import annotations

from enum import StrEnum


class TeamRole(StrEnum):
    ADMIN = "admin"
    MEMBER = "member"
    AUDITOR = "auditor"


class TeamAction(StrEnum):
    # Using the team's servers: calls, tool lists, resources, prompts, completions, subscriptions.
    USE_SERVERS = "use_servers"
    # Seeing the team's servers on the server list (their settings, never secret values).
    SEE_SERVERS = "see_servers"
    # Registering, changing, testing and deleting servers; automatic answers to forms.
    MANAGE_SERVERS = "manage_servers"
    MANAGE_POLICY = "manage_policy"
    MANAGE_TEAM_CREDENTIALS = "manage_team_credentials"
    # Saving one's own credentials for the team's servers.
    OWN_CREDENTIALS = "own_credentials"
    # Inviting, revoking invitations, changing roles, removing members, renaming and deleting the team.
    MANAGE_MEMBERS = "manage_members"
    SEE_MEMBERS = "see_members"
    # The team's rows of the audit log (everyone always reads their own).
    READ_TEAM_AUDIT = "read_team_audit"
    # Other people's call records on the team's servers (everyone always reads their own).
    READ_TEAM_CALLS = "read_team_calls"


A, M, U = TeamRole.ADMIN, TeamRole.MEMBER, TeamRole.AUDITOR

# The whole answer. A role missing from a row may not do it; no role (not in the team) may do nothing.
ALLOWED: dict[TeamAction, frozenset[TeamRole]] = {
    TeamAction.USE_SERVERS: frozenset({A, M}),
    TeamAction.SEE_SERVERS: frozenset({A, M, U}),
    TeamAction.MANAGE_SERVERS: frozenset({A}),
    TeamAction.MANAGE_POLICY: frozenset({A}),
    TeamAction.MANAGE_TEAM_CREDENTIALS: frozenset({A}),
    TeamAction.OWN_CREDENTIALS: frozenset({A, M}),
    TeamAction.MANAGE_MEMBERS: frozenset({A}),
    TeamAction.SEE_MEMBERS: frozenset({A, M, U}),
    TeamAction.READ_TEAM_AUDIT: frozenset({A, U}),
    TeamAction.READ_TEAM_CALLS: frozenset({U}),
}


def may(role: str | None, action: TeamAction) -> bool:
    """May a person with `role` in a team (None: not in it) do `action` there?"""
    return role is not None and role in ALLOWED[action]


def roles_that_may(action: TeamAction) -> list[str]:
    """For querysets: the role values that may do `action`, in a stable order."""
    return sorted(role.value for role in ALLOWED[action])


# -- changes to a membership -------------------------------------------------------------------

LAST_ADMIN = "A team needs an admin: make someone else admin first."


def membership_change_error(
    actor_role: str | None, is_self: bool, target_role: str, new_role: str | None, admins: int
) -> str:
    """Why a change to a membership is refused, or "" when it may go ahead.

    `new_role` None means the membership ends (removed, or left when `is_self`); `admins` is how many
    admins the team has now. Anyone may leave; only admins change or end other people's memberships
    (and their own role); the last admin can neither leave, be removed nor stop being admin.
    """
    if is_self and new_role is None:
        allowed = actor_role is not None
    else:
        allowed = may(actor_role, TeamAction.MANAGE_MEMBERS)
    if not allowed:
        return "Only the team's admins can change its members."
    if new_role is not None and new_role not in {role.value for role in TeamRole}:
        return "Unknown role."
    if target_role == TeamRole.ADMIN and new_role != TeamRole.ADMIN and admins <= 1:
        return LAST_ADMIN
    return ""
