"""The registry: teams, who belongs to them, and the MCP servers they have registered."""

from __future__ import annotations

import os
from typing import Any

from django.conf import settings
from django.db import models

from sessions.mcp.config import Negotiated, ServerConfig
from sessions.mcp.naming import normalize_name
from sessions.mcp.owner import Owner
from sessions.mcp.ssrf import NetworkPolicy

from .outbound import allowed_commands, sandbox_policy
from .policy import Defaults, Rule
from .roles import TeamAction, roles_that_may


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    """The roles of servers/roles.py, as a model field's choices."""

    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"
    AUDITOR = "auditor", "Auditor"


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership_per_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class Invitation(models.Model):
    """An admin's invitation of an email address into a team, with a role.

    Only the SHA-256 of the link's token is stored: the link is shown once to the admin and mailed to
    the address, and a copy of the database cannot be turned into working links.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    token_hash = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation of {self.email} to {self.team}"

    @property
    def state(self) -> str:
        from django.utils import timezone

        if self.accepted_at:
            return "accepted"
        if self.revoked_at:
            return "revoked"
        if self.expires_at <= timezone.now():
            return "expired"
        return "pending"


class TransportKind(models.TextChoices):
    STDIO = "stdio", "stdio (a local command)"
    HTTP = "http", "Streamable HTTP"
    SSE = "sse", "SSE (legacy HTTP+SSE)"
    WEBSOCKET = "websocket", "WebSocket"


REMOTE_TRANSPORTS = (TransportKind.HTTP, TransportKind.SSE, TransportKind.WEBSOCKET)


class ProtocolSetting(models.TextChoices):
    AUTO = "auto", "Auto (ask with server/discover, fall back to the handshake)"
    LEGACY = "legacy", "Handshake era only (2024-11-05 … 2025-11-25)"
    MODERN = "modern", "2026-07-28 only"


class ServerQuerySet(models.QuerySet["Server"]):
    def visible_to(self, user: Any) -> ServerQuerySet:
        """The servers of every team the user belongs to; nothing for anonymous users."""
        return self.where(user, TeamAction.SEE_SERVERS)

    def usable_by(self, user: Any) -> ServerQuerySet:
        """The servers the user may call: not an auditor's (servers/roles.py)."""
        return self.where(user, TeamAction.USE_SERVERS)

    def administered_by(self, user: Any) -> ServerQuerySet:
        return self.where(user, TeamAction.MANAGE_SERVERS)

    def where(self, user: Any, action: TeamAction) -> ServerQuerySet:
        """The servers of the teams where the user's role may do `action` (one join, by the roles table)."""
        if not user.is_authenticated:
            return self.none()
        return self.filter(team__memberships__user=user, team__memberships__role__in=roles_that_may(action))


# The levels of MCP log messages (RFC 5424), least severe first; empty asks the server for none.
LOG_LEVEL_CHOICES = [
    ("debug", "debug"),
    ("info", "info"),
    ("notice", "notice"),
    ("warning", "warning"),
    ("error", "error"),
    ("critical", "critical"),
    ("alert", "alert"),
    ("emergency", "emergency"),
    ("", "none (no server logs)"),
]


def server_variables() -> dict[str, str | None]:
    """The values of the variables the operator exposes to servers (None: exposed but not set).

    Read afresh for every connection; no other name of the portal's environment is ever read.
    """
    return {name: os.environ.get(name) for name in settings.PORTAL_SERVER_VARIABLES}


class Server(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="servers")
    name = models.CharField(max_length=64, help_text="Letters, digits, _ and -; tools appear as mcp__<name>__<tool>.")
    description = models.CharField(max_length=300, blank=True)
    transport = models.CharField(max_length=10, choices=TransportKind.choices, default=TransportKind.STDIO)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    cwd = models.CharField("working directory", max_length=500, blank=True)
    # Not a URLField: ws:// and wss:// are valid here, and so is ${VAR} (the form checks both).
    url = models.CharField(max_length=500, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    request_timeout = models.FloatField(
        default=60.0, help_text="Seconds a request may take before the call ends as timed out."
    )
    reset_timeout_on_progress = models.BooleanField(
        default=False, help_text="Restart the request timeout whenever the server reports progress."
    )
    log_level = models.CharField(
        "server log level",
        max_length=9,
        choices=LOG_LEVEL_CHOICES,
        default="info",
        blank=True,
        help_text="The least severe of the server's log messages (notifications/message) shown with a call.",
    )
    elicitation_timeout = models.FloatField(
        null=True,
        blank=True,
        help_text="Seconds a person has to answer the server's form before it hears 'cancel'; "
        "empty: the portal's PORTAL_ELICITATION_TIMEOUT.",
    )
    # file:// URIs the server may work in, told to it on roots/list.
    roots = models.JSONField(default=list, blank=True)
    protocol = models.CharField(max_length=10, choices=ProtocolSetting.choices, default=ProtocolSetting.AUTO)
    shared = models.BooleanField(
        "shared session", default=False, help_text="One session for the whole team instead of one per user."
    )
    network = models.BooleanField(
        "network access", default=True, help_text="stdio: the server may reach the network from its sandbox."
    )
    # The command line was last set by an operator (a superuser), who may start any command; a team
    # admin's must fit PORTAL_STDIO_COMMANDS, checked again at every start (servers/outbound.py).
    command_set_by_operator = models.BooleanField(default=False)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    # What the last worker that listed this server's tools saw, so pages render without a round trip.
    tools = models.JSONField(default=list, blank=True)
    tools_listed_at = models.DateTimeField(null=True, blank=True)
    # How many resources, resource templates and prompts the last worker to list them saw
    # (None: never listed), so the catalog shows them without a round trip.
    resource_count = models.PositiveIntegerField(null=True, blank=True)
    template_count = models.PositiveIntegerField(null=True, blank=True)
    prompt_count = models.PositiveIntegerField(null=True, blank=True)
    # The last "Test connection": the handshake's facts, or the diagnosis of its failure.
    last_test = models.JSONField(default=dict, blank=True)
    last_tested_at = models.DateTimeField(null=True, blank=True)
    # What the server answered about protocol eras (sessions.mcp.config.Negotiated), so the next
    # connect skips the server/discover probe; only used while the config fingerprint matches.
    negotiated = models.JSONField(default=dict, blank=True)

    objects = ServerQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="unique_server_name_per_team")]

    def __str__(self) -> str:
        return self.name

    @property
    def seconds_to_answer(self) -> float:
        return self.elicitation_timeout or settings.PORTAL_ELICITATION_TIMEOUT

    @property
    def prefix(self) -> str:
        return f"mcp__{normalize_name(self.name)}__"

    @property
    def target(self) -> str:
        """What a person recognises the server by: its command line or its URL."""
        if self.transport == TransportKind.STDIO:
            return " ".join([self.command, *self.args])
        return self.url

    def connection_owner(self, user_id: int) -> str:
        """Whose session a call uses: the user's own, or the team's when the server is shared."""
        return Owner.team(self.team_id) if self.shared else Owner.user(user_id)

    def to_config(self) -> ServerConfig:
        # ${VAR} reads only what the operator exposes; ${secret:NAME} is the user's (sessions/credentials.py).
        return ServerConfig(
            name=self.name,
            transport=self.transport,  # type: ignore[arg-type]
            command=self.command,
            args=tuple(self.args),
            env=dict(self.env),
            cwd=self.cwd or None,
            url=self.url,
            headers=dict(self.headers),
            request_timeout=self.request_timeout,
            connect_timeout=settings.MCP_CONNECT_TIMEOUT,
            reset_timeout_on_progress=self.reset_timeout_on_progress,
            log_level=self.log_level,
            roots=tuple(self.roots),
            protocol=self.protocol,  # type: ignore[arg-type]
            negotiated=Negotiated.from_dict(self.negotiated),
            variables=server_variables(),
            network=NetworkPolicy(allow_private=settings.PORTAL_ALLOW_PRIVATE_NETWORK),
            allowed_commands=allowed_commands(self.command_set_by_operator),
            sandbox=sandbox_policy(self.network) if self.transport == TransportKind.STDIO else None,
        )

    @property
    def placeholders(self) -> list[str]:
        """The placeholders in its settings that connecting will not fill in (not exposed to servers,
        not set, or not a placeholder the portal knows): what it still needs."""
        # mcp_json imports these models.
        from .mcp_json import placeholder_report

        fields = [self.command, self.args, self.env, self.cwd, self.url, self.headers]
        return [
            placeholder.text for placeholder in placeholder_report(fields, server_variables()) if not placeholder.filled
        ]

    def tool(self, name: str) -> dict[str, Any] | None:
        return next((tool for tool in self.tools if tool.get("name") == name), None)

    def is_admin(self, user: Any) -> bool:
        return Membership.objects.filter(
            team_id=self.team_id, user=user, role__in=roles_that_may(TeamAction.MANAGE_SERVERS)
        ).exists()


class ServerUnusable(Exception):
    """Why a server cannot be used now: a stable `kind` and a sentence for the person (and the
    server, when the person may know of it: a disabled one of their team)."""

    def __init__(self, kind: str, message: str, server: Server | None = None):
        super().__init__(message)
        self.kind, self.message, self.server = kind, message, server


def usable_server(server_id: Any, user: Any = None, servers: ServerQuerySet | None = None) -> Server:
    """The server, if it exists, is enabled and (given `user`) belongs to one of the user's teams.

    The one answer to "may this server be used?" for every way of using one: a call, its tool list, a
    connection test, resources, prompts, completions, subscriptions. The consumer asks with the user
    at the door; the worker asks again without one (the door checked the team), since the server may
    have been disabled or deleted in between. A disabled server's process is never started.
    Raises ServerUnusable: `unknown_server` (also for a server of another team, so ids are not for
    probing) or `server_disabled`. `servers` narrows or joins the lookup (select_related).
    """
    rows = Server.objects.all() if servers is None else servers
    if user is not None:
        rows = rows.usable_by(user)
    # A bool is an int to Python, never a server id; order_by(): one row by primary key needs no ordering.
    server = rows.filter(pk=server_id).order_by().first() if type(server_id) is int else None
    if server is None and user is not None and type(server_id) is int:
        # Only on refusal: a server of the user's team that their role may not use (an auditor's) is
        # named as such, rather than as unknown.
        seen = Server.objects.visible_to(user).select_related("team").filter(pk=server_id).order_by().first()
        if seen is not None:
            raise ServerUnusable(
                "role_refused", f"Your role in {seen.team} (auditor) reads its records; it cannot use {seen.name}."
            )
    return check_usable(server)


def check_usable(server: Server | None) -> Server:
    """usable_server() for a row already loaded (a call's server, in the worker): None is unknown."""
    if server is None:
        raise ServerUnusable("unknown_server", "Unknown server.")
    if not server.enabled:
        raise ServerUnusable("server_disabled", f"{server.name} is disabled.", server)
    return server


class Effect(models.TextChoices):
    ALLOW = "allow", "Allow"
    ASK = "ask", "Ask every time"
    DENY = "deny", "Deny"


class PermissionRule(models.Model):
    """allow / ask / deny for tools matching a pattern; a team's rule when `user` is empty, else that user's.

    Rules made by "Always allow" carry the fingerprint and the definition of the tool
    that was approved, and stop applying when the server changes the tool.
    """

    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="permission_rules")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="permission_rules"
    )
    pattern = models.CharField(max_length=210, help_text="mcp__<server> or mcp__<server>__<tool>; * matches anything.")
    effect = models.CharField(max_length=5, choices=Effect.choices)
    fingerprint = models.CharField(max_length=64, blank=True)
    definition = models.JSONField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pattern", "effect"]
        indexes = [models.Index(fields=["team", "user"])]

    def __str__(self) -> str:
        return f"{self.scope} rule {self.pattern} ({self.effect})"

    @property
    def scope(self) -> str:
        return "user" if self.user_id else "team"

    def as_rule(self) -> Rule:
        return Rule(
            scope="user" if self.user_id else "team",
            pattern=self.pattern,
            effect=self.effect,  # type: ignore[arg-type]
            id=self.pk,
            fingerprint=self.fingerprint,
            definition=self.definition,
        )


class TeamPolicy(models.Model):
    """What a team's tools do when no rule matches, by what their annotations say."""

    team = models.OneToOneField(Team, on_delete=models.CASCADE, related_name="policy")
    read_only = models.CharField("Read-only tools", max_length=5, choices=Effect.choices, default=Effect.ALLOW)
    destructive = models.CharField("Destructive tools", max_length=5, choices=Effect.choices, default=Effect.ASK)
    other = models.CharField("Other tools", max_length=5, choices=Effect.choices, default=Effect.ASK)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "team policies"

    def __str__(self) -> str:
        return f"defaults of {self.team}"

    def as_defaults(self) -> Defaults:
        return Defaults(read_only=self.read_only, destructive=self.destructive, other=self.other)  # type: ignore[arg-type]


class HookAction(models.TextChoices):
    ACCEPT = "accept", "Accept with the answer below"
    DECLINE = "decline", "Decline"
    CANCEL = "cancel", "Cancel"


class ElicitationHook(models.Model):
    """A team admin's automatic answer to a server's elicitation forms, given before anyone is asked.

    It matches a form when the server's message contains `message_contains` (any case; empty matches
    every message) and the form asks for at least every field in `fields` (empty: any form).
    """

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="elicitation_hooks")
    message_contains = models.CharField(max_length=200, blank=True)
    fields = models.JSONField(default=list, blank=True)
    action = models.CharField(max_length=8, choices=HookAction.choices, default=HookAction.ACCEPT)
    content = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.server}: {self.action} when {self.message_contains or 'any message'!r}"

    def matches(self, message: str, schema: dict[str, Any]) -> bool:
        if self.message_contains and self.message_contains.casefold() not in message.casefold():
            return False
        asked = set((schema.get("properties") or {}).keys())
        return set(self.fields) <= asked


# Credentials live in a module of their own; importing them here makes them models of this app.
from .credentials.models import Credential, CredentialKind, OAuthFlow, ServerOAuth  # noqa: E402, F401
