"""What the portal decides and writes about credentials; the views only parse, call and render.

Values are sealed here and opened only in the worker. Side effects (telling workers to close
connections that used an old value) wait for the commit. Queries work from rows already loaded
and decrypt nothing.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from sessions import events
from sessions.connection_needs import (
    clear_needs_auth,
    credential_changed_message,
    known_needs_auth,
    owner_of,
    revision,
)
from sessions.mcp.owner import EVERYONE, Owner
from sessions.mcp.secrets import SECRET_NAME, referenced_secrets

from ..models import Server, Team, TransportKind
from ..roles import TeamAction
from .models import Credential, CredentialKind, OAuthFlow, ServerOAuth, hash_state

MAX_SECRET_LENGTH = 10_000


class CredentialError(ValueError):
    """A request the portal will not act on; the message says why."""


def _announce_change(server_id: int, owner: str) -> None:
    if Owner(owner).user_id is not None:
        clear_needs_auth(server_id, owner)
    events.tell_workers(credential_changed_message(server_id, owner))


def _owner_filter(user: Any | None, team: Team | None) -> dict[str, Any]:
    if (user is None) == (team is None):
        raise CredentialError("A credential belongs to one user or one team.")
    return {"user": user, "team": None} if user is not None else {"user": None, "team": team}


def _changed_owner(user: Any | None, team: Team | None) -> str:
    # A team's value is used by every member's connection to the server.
    return Owner.user(user.pk) if user is not None else EVERYONE


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


def do_save_secret(server: Server, name: str, value: str, *, by: Any, for_team: bool) -> Credential:
    """Set a secret for the person saving it, or for the server's whole team."""
    if for_team:
        return do_set_secret(server, name, value, by=by, team=server.team)
    return do_set_secret(server, name, value, by=by, user=by)


@transaction.atomic
def do_revoke_credential(credential: Credential) -> None:
    """Delete it; every worker closes the connections that used it."""
    server_id = credential.server_id
    owner = Owner.user(credential.user_id) if credential.user_id else EVERYONE
    credential.delete()
    transaction.on_commit(lambda: _announce_change(server_id, owner))


def may_revoke(credential: Credential, user: Any) -> bool:
    """Only someone who sees the server and owns the credential (or, a team's, administers it)."""
    visible = Server.objects.visible_to(user).filter(pk=credential.server_id).exists()
    return visible and can_manage(credential, user)


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
    transaction.on_commit(lambda: _announce_change(server.pk, EVERYONE))
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


def do_claim_oauth_flow(user: Any, state: str) -> tuple[OAuthFlow, str] | None:
    """The flow a callback's state belongs to, and the channel its worker waits on; claimed once."""
    if not state:
        return None
    now = timezone.now()
    # Compare-and-set: a callback replayed, or opened by another account, finds nothing.
    claimed = OAuthFlow.objects.filter(
        state_hash=hash_state(state), user=user, status=OAuthFlow.Status.WAITING, expires_at__gt=now
    ).update(status=OAuthFlow.Status.CALLBACK)
    if claimed != 1:
        return None
    flow = OAuthFlow.objects.get(state_hash=hash_state(state))
    return flow, flow.channel()


# -- Queries: what a person's credentials pages show ---------------------------------------------------


def credential_servers(user: Any) -> QuerySet[Server]:
    """The servers a person keeps credentials for."""
    # Auditors keep no credentials for the team's servers (servers/roles.py): they never call them.
    return Server.objects.where(user, TeamAction.OWN_CREDENTIALS).select_related("team", "oauth").distinct()


def credential_server(user: Any, server_id: int) -> Server | None:
    return credential_servers(user).filter(pk=server_id).first()


def _asked_for_authorization(seen: dict[str, Any] | None) -> bool:
    # "needs_auth" is also a secret not set yet ("Connect your account: set NAME …"): not OAuth.
    if not seen or seen.get("kind") != "needs_auth":
        return False
    return seen.get("status_code") == 401 or not str(seen.get("message", "")).startswith("Connect your account: set ")


def server_uses_oauth(server: Server, rows: list[Credential], needs_auth: dict[str, Any] | None) -> bool:
    """Whether to offer "Connect your account": the server is known to use OAuth, from its settings
    (a client or metadata URL configured), a connection made before, or its last answer (a 401,
    an authorization the server asked for). An HTTP server that never asked is not offered it."""
    if server.transport == TransportKind.STDIO:
        return False
    settings = getattr(server, "oauth", None)
    if settings is not None and not settings.enabled:
        return False
    if settings is not None and (settings.client_id or settings.metadata_url):
        return True
    if any(row.kind == CredentialKind.OAUTH for row in rows):
        return True
    # The remembered "needs your authorization" is only ever the server's own answer (credentials.settle).
    return _asked_for_authorization(server.last_test) or needs_auth is not None


def server_needs(server: Server, user: Any, rows: list[Credential]) -> dict[str, Any]:
    """What this user must still provide for a server, from rows already loaded (nothing decrypted)."""
    mine = [r for r in rows if r.user_id == user.pk]
    team = [r for r in rows if r.team_id is not None]
    names = sorted(referenced_secrets(server.to_config()))
    secrets = []
    for name in names:
        own = next((r for r in mine if r.kind == CredentialKind.SECRET and r.name == name), None)
        shared = next((r for r in team if r.kind == CredentialKind.SECRET and r.name == name), None)
        secrets.append({"name": name, "own": own, "shared": shared, "set": bool(own or shared)})
    extra = [r for r in mine if r.kind == CredentialKind.SECRET and r.name not in names]
    oauth = next((r for r in mine if r.kind == CredentialKind.OAUTH), None)
    team_oauth = next((r for r in team if r.kind == CredentialKind.OAUTH), None)
    needs_auth = known_needs_auth(server.pk, owner_of(user.pk), f"{server.to_config().fingerprint()}.{revision(rows)}")
    uses_oauth = server_uses_oauth(server, rows, needs_auth)
    missing = [s["name"] for s in secrets if not s["set"]]
    connected = bool((oauth and oauth.has_tokens) or (team_oauth and team_oauth.has_tokens))
    attention = bool(missing or needs_auth or (oauth and oauth.last_error and not oauth.has_tokens))
    return {
        "server": server,
        "secrets": secrets,
        "extra": extra,
        "oauth": oauth,
        "team_oauth": team_oauth,
        "uses_oauth": uses_oauth,
        "needs_auth": needs_auth,
        "missing": missing,
        "attention": attention,
        # Not "ready" before an OAuth server is connected: whether it needs it is only known then.
        "ready": not attention and (connected or not uses_oauth),
        # A row without tokens (a denied consent, a registration) gives nothing to revoke.
        "can_revoke": bool(oauth and oauth.has_tokens),
        "is_admin": server.is_admin(user),
    }


def my_credential_needs(user: Any) -> list[dict[str, Any]]:
    """What each server needs from this person, those needing attention first."""
    servers = list(credential_servers(user))
    rows = list(
        Credential.objects.filter(server__in=servers, user=user)
        | Credential.objects.filter(server__in=servers, team__memberships__user=user)
    )
    entries = [server_needs(server, user, [r for r in rows if r.server_id == server.pk]) for server in servers]
    entries.sort(key=lambda e: (not e["attention"], e["server"].name.lower()))
    return entries


def oauth_tokens(user: Any) -> tuple[QuerySet[Credential], QuerySet[Credential]]:
    """This person's OAuth connections, and their teams' shared ones, for token health."""
    servers = list(credential_servers(user))
    tokens = (
        Credential.objects.filter(kind=CredentialKind.OAUTH, server__in=servers)
        .filter(user=user)
        .select_related("server")
        .order_by("server__name")
    )
    team_tokens = (
        Credential.objects.filter(kind=CredentialKind.OAUTH, server__in=servers, team__isnull=False)
        .select_related("server", "team")
        .order_by("server__name")
    )
    return tokens, team_tokens


def oauth_settings_of(server: Server) -> ServerOAuth | None:
    return ServerOAuth.objects.filter(server=server).first()
