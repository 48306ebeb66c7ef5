"""Writes that matter in the registry. Views and tasks call these; nothing hides in save()."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from .models import Membership, Role, Server, Team

SERVER_FIELDS = (
    "name",
    "description",
    "transport",
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "request_timeout",
    "reset_timeout_on_progress",
    "protocol",
    "shared",
    "enabled",
)


@transaction.atomic
def do_create_server(team: Team, by: Any, fields: dict[str, Any]) -> Server:
    return Server.objects.create(team=team, created_by=by, **{k: fields[k] for k in SERVER_FIELDS if k in fields})


@transaction.atomic
def do_update_server(server: Server, fields: dict[str, Any]) -> Server:
    changed = {k: fields[k] for k in SERVER_FIELDS if k in fields}
    for name, value in changed.items():
        setattr(server, name, value)
    if changed.keys() - {"name", "description", "enabled", "request_timeout", "reset_timeout_on_progress", "shared"}:
        # The old tool list described another command or URL.
        server.tools, server.tools_listed_at = [], None
    server.save()
    return server


def do_set_server_enabled(server: Server, enabled: bool) -> None:
    Server.objects.filter(pk=server.pk).update(enabled=enabled, updated_at=timezone.now())


def do_delete_server(server: Server) -> None:
    # Call records keep the server's name (ToolCall.server_name), so history outlives the server.
    server.delete()


def do_record_tools(server_id: int, tools: list[dict[str, Any]]) -> None:
    Server.objects.filter(pk=server_id).update(tools=tools, tools_listed_at=timezone.now())


def do_record_test(server_id: int, result: dict[str, Any]) -> None:
    Server.objects.filter(pk=server_id).update(last_test=result, last_tested_at=timezone.now())


def do_record_negotiated(server_id: int, negotiated: dict[str, Any]) -> None:
    """Remember which protocol era the server answered with (see Server.negotiated)."""
    Server.objects.filter(pk=server_id).update(negotiated=negotiated)


@transaction.atomic
def do_ensure_membership(user: Any) -> Membership:
    """Every account belongs to a team: the first one (and any superuser) as admin of the default team."""
    existing = Membership.objects.filter(user=user).order_by("created_at").first()
    if existing is not None:
        return existing
    team, _ = Team.objects.get_or_create(name=settings.PORTAL_DEFAULT_TEAM)
    has_admin = Membership.objects.select_for_update().filter(team=team, role=Role.ADMIN).exists()
    role = Role.ADMIN if user.is_superuser or not has_admin else Role.MEMBER
    return Membership.objects.create(team=team, user=user, role=role)
