"""Writes that matter for credentials. Values are sealed here and opened only in the worker.

Side effects (telling workers to close connections that used an old value) wait for the commit.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from sessions import events
from sessions.connection_needs import clear_needs_auth, credential_changed_message
from sessions.mcp.secrets import SECRET_NAME

from .credential_models import Credential, CredentialKind, OAuthFlow, ServerOAuth
from .models import Server, Team

MAX_SECRET_LENGTH = 10_000


class CredentialError(ValueError):
    """A request the portal will not act on; the message says why."""


def _announce_change(server_id: int, owner: str) -> None:
    if owner.startswith("user:"):
        clear_needs_auth(server_id, owner)
    events.tell_workers(credential_changed_message(server_id, owner))


def _owner_filter(user: Any | None, team: Team | None) -> dict[str, Any]:
    if (user is None) == (team is None):
        raise CredentialError("A credential belongs to one user or one team.")
    return {"user": user, "team": None} if user is not None else {"user": None, "team": team}


def _changed_owner(user: Any | None, team: Team | None) -> str:
    # A team's value is used by every member's connection to the server.
    return f"user:{user.pk}" if user is not None else "*"


@transaction.atomic
def do_set_secret(
    server: Server, name: str, value: str, *, by: Any, user: Any = None, team: Team | None = None
) -> Credential:
    """Set (or replace) a named secret for the user, or for the whole team (admins only)."""
    name = name.strip()
    if not SECRET_NAME.match(name):
        raise CredentialError("A secret's name is 1 to 100 letters, digits, _ . or -, starting with a letter or _.")
    if not value or len(value) > MAX_SECRET_LENGTH:
        raise CredentialError(f"Enter a value of 1 to {MAX_SECRET_LENGTH} characters.")
    if team is not None and not server.is_admin(by):
        raise CredentialError("Only the team's admins can set a value for the whole team.")
    owner = _owner_filter(user, team)
    row = (
        Credential.objects.select_for_update()
        .filter(server=server, kind=CredentialKind.SECRET, name=name, **owner)
        .first()
    )
    if row is None:
        row = Credential(server=server, kind=CredentialKind.SECRET, name=name, **owner)
    else:
        row.generation = F("generation") + 1
    row.set_by = by
    row.last_error = ""
    row.seal(value)
    row.save()
    row.refresh_from_db()
    transaction.on_commit(lambda: _announce_change(server.pk, _changed_owner(user, team)))
    return row


@transaction.atomic
def do_revoke_credential(credential: Credential) -> None:
    """Delete it; every worker closes the connections that used it."""
    server_id = credential.server_id
    owner = f"user:{credential.user_id}" if credential.user_id else "*"
    credential.delete()
    transaction.on_commit(lambda: _announce_change(server_id, owner))


def can_manage(credential: Credential, user: Any) -> bool:
    if credential.user_id is not None:
        return credential.user_id == user.pk
    return credential.server.is_admin(user)


@transaction.atomic
def do_set_oauth_settings(server: Server, fields: dict[str, Any]) -> ServerOAuth:
    settings_row, _ = ServerOAuth.objects.select_for_update().get_or_create(server=server)
    for name in ("enabled", "client_id", "token_endpoint_auth_method", "metadata_url", "scope"):
        if name in fields:
            setattr(settings_row, name, fields[name])
    if fields.get("clear_client_secret"):
        settings_row.set_client_secret("")
    elif fields.get("client_secret"):
        settings_row.set_client_secret(fields["client_secret"])
    settings_row.save()
    transaction.on_commit(lambda: _announce_change(server.pk, "*"))
    return settings_row


@transaction.atomic
def do_start_oauth_flow(server: Server, user: Any, return_to: str, seconds: float, for_team: bool = False) -> OAuthFlow:
    if for_team and not server.is_admin(user):
        raise CredentialError("Only the team's admins can connect an account for the whole team.")
    # Old unfinished flows of this user are dropped: their callbacks can no longer match.
    OAuthFlow.objects.filter(expires_at__lt=timezone.now()).delete()
    return OAuthFlow.objects.create(
        user=user,
        server=server,
        for_team=for_team,
        return_to=return_to,
        expires_at=timezone.now() + timedelta(seconds=seconds + 60),
    )
