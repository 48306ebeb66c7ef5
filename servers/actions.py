"""Writes that matter in the registry. Views and tasks call these; nothing hides in save()."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from sessions.mcp.naming import tool_full_name

from . import mcp_json
from .credentials.actions import do_set_secret
from .models import (
    Effect,
    ElicitationHook,
    Membership,
    PermissionRule,
    Role,
    Server,
    Team,
    TeamPolicy,
    TransportKind,
    server_variables,
)
from .outbound import address_error, command_error, env_error
from .policy import tool_fingerprint

SERVER_FIELDS = (
    "name",
    "description",
    "transport",
    "command",
    "args",
    "env",
    "cwd",
    "network",
    "command_set_by_operator",
    "url",
    "headers",
    "request_timeout",
    "reset_timeout_on_progress",
    "log_level",
    "elicitation_timeout",
    "roots",
    "protocol",
    "shared",
    "enabled",
)


@transaction.atomic
def do_create_server(team: Team, by: Any, fields: dict[str, Any]) -> Server:
    return Server.objects.create(team=team, created_by=by, **{k: fields[k] for k in SERVER_FIELDS if k in fields})


@transaction.atomic
def do_update_server(server: Server, fields: dict[str, Any]) -> Server:
    # Only what differs: the edit form sends every field, and an unchanged command keeps its tool list.
    changed = {k: fields[k] for k in SERVER_FIELDS if k in fields and fields[k] != getattr(server, k)}
    for name, value in changed.items():
        setattr(server, name, value)
    if changed.keys() - {
        "name",
        "description",
        "enabled",
        "request_timeout",
        "reset_timeout_on_progress",
        "log_level",
        "elicitation_timeout",
        "shared",
        "network",
        "command_set_by_operator",
    }:
        # The old tool list (and counts) described another command or URL.
        server.tools, server.tools_listed_at = [], None
        server.resource_count = server.template_count = server.prompt_count = None
    server.save()
    return server


def do_set_server_enabled(server: Server, enabled: bool) -> None:
    Server.objects.filter(pk=server.pk).update(enabled=enabled, updated_at=timezone.now())


def do_delete_server(server: Server) -> None:
    # Call records keep the server's name (ToolCall.server_name), so history outlives the server.
    server.delete()


def do_record_tools(server_id: int, tools: list[dict[str, Any]]) -> None:
    Server.objects.filter(pk=server_id).update(tools=tools, tools_listed_at=timezone.now())


def do_record_resource_counts(server_id: int, resources: int, templates: int) -> None:
    Server.objects.filter(pk=server_id).update(resource_count=resources, template_count=templates)


def do_record_prompt_count(server_id: int, prompts: int) -> None:
    Server.objects.filter(pk=server_id).update(prompt_count=prompts)


def do_record_test(server_id: int, result: dict[str, Any]) -> None:
    """The test's result; a successful one also counts what the server offers, as listing would."""
    counted = {k: result[k] for k in ("resource_count", "template_count", "prompt_count") if result.get(k) is not None}
    Server.objects.filter(pk=server_id).update(last_test=result, last_tested_at=timezone.now(), **counted)


def plan_import(team: Team, text: str, operator: bool = False) -> mcp_json.ParsedConfig:
    """What importing `text` into `team` would do, entry by entry; writes nothing.

    `operator`: imported by a superuser (or the import_servers command), who may start any command.
    """
    parsed = mcp_json.parse(text, TransportKind.values)
    for entry in parsed.entries:
        if entry.status == "error":
            continue
        fields = entry.fields
        if "command" in fields:
            fields["command_set_by_operator"] = operator
            error = env_error(fields.get("env")) or command_error(
                fields["command"], fields.get("args") or [], fields.get("cwd") or None, operator
            )
        else:
            error = address_error(fields.get("url", ""))
        if error:
            entry.fail(error)
        entry.report = mcp_json.placeholder_report(fields, server_variables())
        entry.credentials = mcp_json.literal_credentials(fields)
    return mcp_json.mark_duplicates(parsed, Server.objects.filter(team=team).values_list("name", flat=True))


@transaction.atomic
def do_import_servers(
    team: Team, by: Any, text: str, operator: bool | None = None, as_secrets: bool = False
) -> tuple[mcp_json.ParsedConfig, list[Server]]:
    """Create every new server of an mcpServers config, or none of them.

    Entries in error block the whole import; duplicates (by name) and transports the
    portal cannot run yet are skipped, so importing the same file twice creates nothing twice.
    `operator` defaults to whether `by` is a superuser. `as_secrets`: each credential written in
    the clear (an env or header value) is stored as the team's secret and referenced as
    `${secret:NAME}`, instead of being kept in the server's settings.
    """
    if operator is None:
        operator = bool(getattr(by, "is_superuser", False))
    # Lock the team so that two imports at once cannot both decide a name is new.
    Team.objects.select_for_update().filter(pk=team.pk).first()
    plan = plan_import(team, text, operator)
    created = []
    for entry in plan.to_create:
        fields = dict(entry.fields)
        secrets = mcp_json.as_secrets(fields, entry.credentials) if as_secrets else {}
        server = do_create_server(team, by, {"name": entry.name, "transport": entry.transport, **fields})
        for name, value in secrets.items():
            do_set_secret(server, name, value, by=by, team=team)
        created.append(server)
    return plan, created


def do_record_negotiated(server_id: int, negotiated: dict[str, Any]) -> None:
    """Remember which protocol era the server answered with (see Server.negotiated)."""
    Server.objects.filter(pk=server_id).update(negotiated=negotiated)


@transaction.atomic
def do_join_team(user: Any, team_name: str, role: str) -> Membership:
    """Put `user` in the team of that name (made if missing) with `role`; an existing membership stays."""
    team, _ = Team.objects.get_or_create(name=team_name)
    return Membership.objects.get_or_create(team=team, user=user, defaults={"role": role})[0]


def do_join_signup_team(user: Any) -> Membership | None:
    """A new account joins the team the operator named for signups (PORTAL_SIGNUP_TEAM), as a member, or
    none: people join teams by invitation. Signing up never makes anyone an admin of anything."""
    if not settings.PORTAL_SIGNUP_TEAM:
        return None
    return do_join_team(user, settings.PORTAL_SIGNUP_TEAM, Role.MEMBER)


def do_give_superuser_a_team(user: Any) -> Membership | None:
    """A superuser (the operator, made by createsuperuser) with no team yet becomes admin of the default
    team (PORTAL_DEFAULT_TEAM, the one `manage.py bootstrap` makes), so the portal has someone to run it."""
    if not user.is_superuser or Membership.objects.filter(user=user).exists():
        return None
    return do_join_team(user, settings.PORTAL_DEFAULT_TEAM, Role.ADMIN)


# -- permission rules and team defaults ----------------------------------------------------


def _audit_policy(by: Any, team: Team, rule: PermissionRule | None, outcome: str, **fields: Any) -> None:
    # The audit log is the sessions app's; its models load after this app's.
    from sessions import audit
    from sessions.models import AuditKind

    if rule is not None:
        fields.setdefault("tool", rule.pattern)
        fields.setdefault("decision", rule.effect)
        fields.setdefault("rule", audit.describe_rule(rule.as_rule().as_dict()))
    audit.record(AuditKind.POLICY, by, team=team, outcome=outcome, **fields)


@transaction.atomic
def do_add_rule(team: Team, user: Any | None, pattern: str, effect: str, by: Any) -> PermissionRule:
    """A team rule (user None; admins only) or a user's own rule, unpinned: it applies whatever the tool says."""
    rule, _ = PermissionRule.objects.update_or_create(
        team=team,
        user=user,
        pattern=pattern,
        effect=effect,
        defaults={"fingerprint": "", "definition": None, "created_by": by},
    )
    _audit_policy(by, team, rule, "rule_saved")
    return rule


@transaction.atomic
def do_delete_rule(rule: PermissionRule, by: Any) -> None:
    _audit_policy(by, rule.team, rule, "rule_deleted")
    rule.delete()


@transaction.atomic
def do_pin_rule(server: Server, tool: dict[str, Any], user: Any | None, by: Any) -> PermissionRule:
    """Allow one tool, pinned to the definition shown: the team's (user None) or the user's own.

    It is also how an approval is renewed after the server changed the tool.
    """
    pattern = tool_full_name(server.name, tool.get("name", ""))
    rule, _ = PermissionRule.objects.update_or_create(
        team_id=server.team_id,
        user=user,
        pattern=pattern,
        effect=Effect.ALLOW,
        defaults={"fingerprint": tool_fingerprint(tool), "definition": tool, "created_by": by},
    )
    _audit_policy(by, server.team, rule, "rule_pinned", server_id=server.pk, server_name=server.name)
    return rule


@transaction.atomic
def do_set_team_defaults(team: Team, by: Any, read_only: str, destructive: str, other: str) -> TeamPolicy:
    policy, _ = TeamPolicy.objects.update_or_create(
        team=team, defaults={"read_only": read_only, "destructive": destructive, "other": other, "updated_by": by}
    )
    _audit_policy(
        by,
        team,
        None,
        "defaults_saved",
        reason=f"read-only: {read_only}, destructive: {destructive}, other: {other}",
    )
    return policy


@transaction.atomic
def do_add_elicitation_hook(server: Server, by: Any, fields: dict[str, Any]) -> ElicitationHook:
    hook = ElicitationHook.objects.create(
        server=server,
        created_by=by,
        message_contains=fields["message_contains"],
        fields=fields["fields"],
        action=fields["action"],
        content=fields["content"] if fields["action"] == "accept" else {},
    )
    _audit_policy(by, server.team, None, "hook_saved", server_id=server.pk, server_name=server.name, reason=str(hook))
    return hook


@transaction.atomic
def do_delete_elicitation_hook(hook: ElicitationHook, by: Any) -> None:
    server = hook.server
    _audit_policy(by, server.team, None, "hook_deleted", server_id=server.pk, server_name=server.name, reason=str(hook))
    hook.delete()
