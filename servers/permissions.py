"""The rows behind a decision: who may do what in a team (by role), and which tool calls the rules allow.

`team_allows()` is the one door for every page and WebSocket entry point that asks what a person's
role lets them do in a team; querysets use `teams_where()` (or ServerQuerySet.where), read from the
same table (servers/roles.py).

For tools: load a team's and a user's rules and the team's defaults, then decide.

Two queries at most per decision: the rules of (team, user) in one, and the team's
defaults in another unless the server was loaded with `select_related("team__policy")`.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from sessions.mcp.naming import tool_full_name

from . import decisions
from .models import Membership, PermissionRule, Server, Team, TeamPolicy
from .policy import Decision, Defaults, Rule, classify, decide, definition_diff
from .roles import TeamAction, may, roles_that_may


def team_role(user: Any, team_id: int) -> str | None:
    """The user's role in the team, or None when they are not in it (or not logged in)."""
    if not getattr(user, "is_authenticated", False):
        return None
    return Membership.objects.filter(team_id=team_id, user=user).values_list("role", flat=True).first()


def team_allows(user: Any, team_id: int, action: TeamAction) -> bool:
    """May `user` do `action` in the team? Read afresh on every ask, so a changed role counts at once."""
    return may(team_role(user, team_id), action)


def teams_where(user: Any, action: TeamAction):
    """The teams where the user's role may do `action`."""
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    return Team.objects.filter(memberships__user=user, memberships__role__in=roles_that_may(action))


def team_defaults(team: Team) -> Defaults:
    try:
        return team.policy.as_defaults()
    except TeamPolicy.DoesNotExist:
        return Defaults()


def rules_for(team_id: int, user_id: int | None) -> list[Rule]:
    """The team's rules and the user's own rules in that team (cached: servers/decisions.py)."""

    def read() -> list[Rule]:
        rows = PermissionRule.objects.filter(Q(user__isnull=True) | Q(user_id=user_id), team_id=team_id)
        return [row.as_rule() for row in rows]

    return decisions.cached(("rules", team_id, user_id), read)


def usable_servers(user: Any) -> list[Server]:
    """The enabled servers the user may call, with their team's policy (cached: servers/decisions.py).
    Shared by every call of this process under one generation: read them, never change them."""
    if not getattr(user, "is_authenticated", False):
        return []

    def read() -> list[Server]:
        # Built only on a miss: building the query is most of what a lookup would cost.
        return list(Server.objects.usable_by(user).select_related("team__policy").filter(enabled=True).order_by("pk"))

    return decisions.cached(("usable", user.pk), read)


def decide_for(server: Server, user_id: int, tool: str, definition: dict[str, Any] | None) -> Decision:
    return decide(
        tool_full_name(server.name, tool), definition, rules_for(server.team_id, user_id), team_defaults(server.team)
    )


def describe_tools(server: Server, user_id: int, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """For pages and the playground, by tool name: its display class, the viewer's decision and
    why, and for each "always allow" given to an earlier definition, what changed since."""
    tools = server.tools if tools is None else tools
    rules = rules_for(server.team_id, user_id)
    defaults = team_defaults(server.team)
    described: dict[str, Any] = {}
    for tool in tools:
        name = tool.get("name", "")
        decision = decide(tool_full_name(server.name, name), tool, rules, defaults)
        described[name] = {
            "class": classify(name, tool.get("annotations")),
            "decision": decision.as_dict(),
            "changes": [
                {"rule": rule.as_dict(), "diff": definition_diff(rule.definition, tool)} for rule in decision.stale
            ],
        }
    return described
