"""Credentials: what people connect to servers with, kept encrypted (servers/credentials/crypto.py).

Imported by servers/models.py, so these are ordinary models of the `servers` app; they live
in a module of their own to keep the registry's models readable.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from sessions.mcp.owner import Owner

from .crypto import key_id_of


def keyring():
    return settings.PORTAL_KEYRING


class CredentialKind(models.TextChoices):
    OAUTH = "oauth", "OAuth"
    SECRET = "secret", "Secret"


class Credential(models.Model):
    """One user's (or, shared, one team's) credential for one server.

    `secret` rows hold a named static value (API key, bearer token, header or env value)
    that a server's config references as ${secret:NAME}. The `oauth` row (name "") holds
    the tokens, the registered client and the discovered metadata. Only the worker decrypts.
    """

    server = models.ForeignKey("servers.Server", on_delete=models.CASCADE, related_name="credentials")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE, related_name="credentials"
    )
    team = models.ForeignKey(
        "servers.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="credentials"
    )
    kind = models.CharField(max_length=10, choices=CredentialKind.choices)
    name = models.CharField(max_length=100, blank=True)
    ciphertext = models.TextField()
    key_id = models.CharField(max_length=32, db_index=True)
    # Facts that are not secret, kept in the clear so pages render without decrypting.
    expires_at = models.DateTimeField(null=True, blank=True)
    scope = models.CharField(max_length=2000, blank=True)
    has_tokens = models.BooleanField(default=False)
    authorized_at = models.DateTimeField(null=True, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    # Bumped by every change a person makes (set, connect), never by a refresh: it is part of
    # the connection key, so a changed credential gets a fresh connection.
    generation = models.PositiveIntegerField(default=1)
    # The single-flight refresh lease (compare-and-set on this row, across processes).
    lease_holder = models.CharField(max_length=64, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(user__isnull=False) & Q(team__isnull=True))
                | (Q(user__isnull=True) & Q(team__isnull=False)),
                name="credential_has_one_owner",
            ),
            models.UniqueConstraint(
                fields=["server", "user", "kind", "name"], condition=Q(user__isnull=False), name="one_user_credential"
            ),
            models.UniqueConstraint(
                fields=["server", "team", "kind", "name"], condition=Q(team__isnull=False), name="one_team_credential"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name or ''} for {self.server_id} ({self.owner})"

    @property
    def owner(self) -> str:
        return Owner.user(self.user_id) if self.user_id else Owner.team(self.team_id)

    @property
    def context(self) -> str:
        # What the ciphertext is bound to: moving it to another row makes it unreadable.
        return f"credential:{self.server_id}:{self.owner}:{self.kind}:{self.name}"

    def seal(self, value: str) -> None:
        self.ciphertext = keyring().encrypt(value, self.context)
        self.key_id = key_id_of(self.ciphertext)

    def open(self) -> str:
        """The plaintext. Raises CredentialUnreadable; call only in the worker, at connect time."""
        return keyring().decrypt(self.ciphertext, self.context)

    def open_json(self) -> dict[str, Any]:
        value = json.loads(self.open())
        return value if isinstance(value, dict) else {}


class ServerOAuth(models.Model):
    """What a team admin configures for OAuth to one server; absent means: OAuth when the server asks."""

    class AuthMethod(models.TextChoices):
        BASIC = "client_secret_basic", "HTTP Basic (client_secret_basic)"
        POST = "client_secret_post", "In the form body (client_secret_post)"
        NONE = "none", "None (public client)"

    server = models.OneToOneField("servers.Server", on_delete=models.CASCADE, related_name="oauth")
    enabled = models.BooleanField(
        default=True, help_text="Use OAuth when the server answers 401. Off: a 401 is only a failure."
    )
    client_id = models.CharField("pre-registered client ID", max_length=300, blank=True)
    client_secret_ciphertext = models.TextField(blank=True)
    client_secret_key_id = models.CharField(max_length=32, blank=True)
    token_endpoint_auth_method = models.CharField(max_length=30, choices=AuthMethod.choices, default=AuthMethod.BASIC)
    metadata_url = models.URLField(
        "authorization server metadata URL",
        max_length=500,
        blank=True,
        help_text="https only. When set, it is used before any discovery.",
    )
    scope = models.CharField(max_length=1000, blank=True, help_text="Scopes to request; empty: as the server says.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"OAuth settings of {self.server_id}"

    @property
    def context(self) -> str:
        return f"server-oauth:{self.server_id}:client_secret"

    def set_client_secret(self, value: str) -> None:
        if value:
            self.client_secret_ciphertext = keyring().encrypt(value, self.context)
            self.client_secret_key_id = key_id_of(self.client_secret_ciphertext)
        else:
            self.client_secret_ciphertext = self.client_secret_key_id = ""

    def client_secret(self) -> str:
        return keyring().decrypt(self.client_secret_ciphertext, self.context) if self.client_secret_ciphertext else ""


class OAuthFlow(models.Model):
    """One interactive authorization in progress: which worker coroutine waits for its callback.

    The PKCE verifier and the state stay in that coroutine's memory; the row maps a hash of the
    state to the coroutine's channel (encrypted), so a callback reaching any web process finds it.
    """

    class Status(models.TextChoices):
        STARTED = "started"
        WAITING = "waiting"
        CALLBACK = "callback"
        DONE = "done"
        FAILED = "failed"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    server = models.ForeignKey("servers.Server", on_delete=models.CASCADE, related_name="+")
    for_team = models.BooleanField(default=False)
    state_hash = models.CharField(max_length=64, null=True, blank=True, unique=True)
    channel_ciphertext = models.TextField(blank=True)
    channel_key_id = models.CharField(max_length=32, blank=True)
    return_to = models.CharField(max_length=500, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.STARTED)
    error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"OAuth flow {self.pk} ({self.status})"

    @property
    def context(self) -> str:
        return f"oauth-flow:{self.pk}:channel"

    def set_channel(self, channel: str) -> None:
        self.channel_ciphertext = keyring().encrypt(channel, self.context)
        self.channel_key_id = key_id_of(self.channel_ciphertext)

    def channel(self) -> str:
        return keyring().decrypt(self.channel_ciphertext, self.context)


def hash_state(state: str) -> str:
    return hashlib.sha256(state.encode()).hexdigest()


# Every encrypted column, for `rotate_keys`: (model, ciphertext field, key id field).
ENCRYPTED_FIELDS: list[tuple[type[models.Model], str, str]] = [
    (Credential, "ciphertext", "key_id"),
    (ServerOAuth, "client_secret_ciphertext", "client_secret_key_id"),
    (OAuthFlow, "channel_ciphertext", "channel_key_id"),
]
