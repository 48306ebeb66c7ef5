"""The registry: teams, who belongs to them, and the MCP servers they have registered."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from sessions.mcp.config import ServerConfig
from sessions.mcp.naming import normalize_name


class Team(models.Model):
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Role(models.TextChoices):
    ADMIN = "admin", "Admin"
    MEMBER = "member", "Member"


class Membership(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["team", "user"], name="one_membership_per_team")]

    def __str__(self) -> str:
        return f"{self.user} in {self.team} ({self.role})"


class TransportKind(models.TextChoices):
    STDIO = "stdio", "stdio (a local command)"
    HTTP = "http", "Streamable HTTP"


class ServerQuerySet(models.QuerySet["Server"]):
    def visible_to(self, user: Any) -> ServerQuerySet:
        """The servers of every team the user belongs to; nothing for anonymous users."""
        if not user.is_authenticated:
            return self.none()
        return self.filter(team__memberships__user=user)

    def administered_by(self, user: Any) -> ServerQuerySet:
        if not user.is_authenticated:
            return self.none()
        return self.filter(team__memberships__user=user, team__memberships__role=Role.ADMIN)


class Server(models.Model):
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="servers")
    name = models.CharField(max_length=64, help_text="Letters, digits, _ and -; tools appear as mcp__<name>__<tool>.")
    description = models.CharField(max_length=300, blank=True)
    transport = models.CharField(max_length=10, choices=TransportKind.choices, default=TransportKind.STDIO)
    command = models.CharField(max_length=500, blank=True)
    args = models.JSONField(default=list, blank=True)
    env = models.JSONField(default=dict, blank=True)
    cwd = models.CharField("working directory", max_length=500, blank=True)
    url = models.URLField(max_length=500, blank=True)
    headers = models.JSONField(default=dict, blank=True)
    request_timeout = models.FloatField(
        default=60.0, help_text="Seconds a request may take before the call ends as timed out."
    )
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    # What the last worker that listed this server's tools saw, so pages render without a round trip.
    tools = models.JSONField(default=list, blank=True)
    tools_listed_at = models.DateTimeField(null=True, blank=True)
    # The last "Test connection": the handshake's facts, or the diagnosis of its failure.
    last_test = models.JSONField(default=dict, blank=True)
    last_tested_at = models.DateTimeField(null=True, blank=True)

    objects = ServerQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="unique_server_name_per_team")]

    def __str__(self) -> str:
        return self.name

    @property
    def prefix(self) -> str:
        return f"mcp__{normalize_name(self.name)}__"

    @property
    def target(self) -> str:
        """What a person recognises the server by: its command line or its URL."""
        if self.transport == TransportKind.STDIO:
            return " ".join([self.command, *self.args])
        return self.url

    def to_config(self) -> ServerConfig:
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
        )

    def tool(self, name: str) -> dict[str, Any] | None:
        return next((tool for tool in self.tools if tool.get("name") == name), None)

    def is_admin(self, user: Any) -> bool:
        return Membership.objects.filter(team_id=self.team_id, user=user, role=Role.ADMIN).exists()


# Credentials live in a module of their own; importing them here makes them models of this app.
from .credential_models import Credential, CredentialKind, OAuthFlow, ServerOAuth  # noqa: E402, F401
