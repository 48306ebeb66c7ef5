"""The worker's side of credentials: the only Django code that decrypts them, at connect time.

`prepare()` turns a server and a user into what the pool needs: the config carrying the user's
decrypted secrets (filled into its `${secret:NAME}` references by the pool, in the same single
pass as `${VAR}`), an OAuth provider backed by the encrypted Credential row, the connection key,
the connection's scrubber, or the reason the call cannot start ("Connect your account"). Values
never leave this process except to the MCP server itself.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.db.models import Q
from django.urls import reverse

from servers.credentials.crypto import CredentialUnreadable
from servers.credentials.models import Credential, CredentialKind
from servers.models import Membership, Server
from servers.roles import TeamAction, roles_that_may

from . import events
from .connection_needs import (
    known_needs_auth,
    mark_needs_auth,
    owner_of,
    revision,
)
from .mcp.config import ConnectionKey, ServerConfig
from .mcp.failure import Failure
from .mcp.owner import EVERYONE, Owner
from .mcp.pool import CallOutcome
from .mcp.secrets import Scrubber, referenced_secrets, remember
from .oauth import attach_provider

log = logging.getLogger(__name__)

NEEDS_AUTH = "needs_auth"


def connect_url(server_id: int) -> str:
    return reverse("my_credentials") + f"#server-{server_id}"


def needs_auth_failure(server: Server, message: str) -> Failure:
    return Failure(NEEDS_AUTH, f"Connect your account: {message}")


# -- which credentials apply ------------------------------------------------------------------


def applicable(server: Server, user_id: int) -> list[Credential]:
    """The user's own credentials for the server, then the team's shared ones.

    A shared server holds one session for the whole team, so only the team's credentials
    may go into it: one member's secret must never serve the others.
    """
    if server.shared:
        return list(Credential.objects.filter(server=server, team_id=server.team_id))
    return list(Credential.objects.filter(server=server).filter(Q(user_id=user_id) | Q(team_id=server.team_id)))


def connection_key(
    server: Server, user_id: int, rows: list[Credential] | None = None, config: ServerConfig | None = None
) -> ConnectionKey:
    """The pool key of a call by `user_id`: the config as the admin wrote it plus which credentials
    apply (never their values), owned by the user, or by the team when the server is shared."""
    rows = applicable(server, user_id) if rows is None else rows
    config = server.to_config() if config is None else config
    current = f"{config.fingerprint()}.{revision(rows)}"
    return ConnectionKey(server.pk, current, server.connection_owner(user_id))


def pick(rows: list[Credential], kind: str, name: str = "") -> Credential | None:
    """The user's own value wins over the team's."""
    own = [r for r in rows if r.kind == kind and r.name == name and r.user_id is not None]
    shared = [r for r in rows if r.kind == kind and r.name == name and r.team_id is not None]
    return (own or shared or [None])[0]


# -- preparing a connection --------------------------------------------------------------------


@dataclass
class Prepared:
    """What the worker connects with, or why it must not try."""

    config: ServerConfig
    key: ConnectionKey
    failure: Failure | None = None
    revision: str = ""

    @cached_property
    def scrub(self) -> Scrubber:
        """The connection's one scrubber: every string its server sends passes it before it is
        stored or shown (sessions/worker/ applies it at each door)."""
        return scrubber_of(self.config)

    def redact(self, text: str) -> str:
        return self.scrub.text(text)


def scrubber_of(config: ServerConfig) -> Scrubber:
    """What the connection built from `config` must never say back: the secrets it was given."""
    return Scrubber.of_secrets(config.secrets)


def prepare(server: Server, user_id: int, with_oauth: bool = True, connecting: bool = False) -> Prepared:
    """`connecting`: the user pressed Connect, so what the needs-auth cache says does not apply."""
    base = server.to_config()
    owner = owner_of(user_id)
    names = referenced_secrets(base)
    # A credential enters a connection only through a ${secret:…} reference, or as OAuth (HTTP
    # transports): a stdio server that references no secret needs no credentials query.
    rows = applicable(server, user_id) if names or base.transport != "stdio" else []
    key = connection_key(server, user_id, rows, base)
    # The needs-auth mark holds for this exact config and these credentials only.
    current = key.fingerprint
    cached = None if connecting else known_needs_auth(server.pk, owner, current)
    if cached is not None:
        return Prepared(base, key, failure=Failure(NEEDS_AUTH, cached["message"]), revision=current)
    secrets: dict[str, str] = {}
    for name in sorted(names):
        row = pick(rows, CredentialKind.SECRET, name)
        if row is None:
            continue
        try:
            secrets[name] = row.open()
        except CredentialUnreadable as exc:
            return Prepared(base, key, failure=needs_auth_failure(server, f"your {name} for {server.name}: {exc}"))
    remember(secrets)
    missing = names - secrets.keys()
    if missing:
        what = ", ".join(sorted(missing))
        return Prepared(base, key, failure=needs_auth_failure(server, f"set {what} for {server.name}."))
    # Filled in by the pool as the connection opens, in the one pass that also fills ${VAR}.
    config = dataclasses.replace(base, secrets=secrets)
    if with_oauth and not server.shared:
        # OAuth tokens are a person's: a session shared by the team never carries one.
        config = attach_provider(config, server, user_id, rows)
    return Prepared(config, key, revision=current)


def team_scrubber(server_id: int) -> Scrubber:
    """For strings stored team-wide (the tool list, the last test): every credential anyone holds
    for this server, each member's and the team's. One member's connection knows only their own
    values, and a server that remembers what another member sent could echo it to the next."""
    replacements: dict[str, str] = {}
    for row in Credential.objects.filter(server_id=server_id):
        try:
            if row.kind == CredentialKind.SECRET:
                replacements[row.open()] = f"${{secret:{row.name}}}"
                continue
            tokens = row.open_json().get("tokens") or {}
        except CredentialUnreadable:
            continue  # nothing readable, nothing a server could have been given
        for name in ("access_token", "refresh_token"):
            if isinstance(tokens.get(name), str) and tokens[name]:
                replacements[tokens[name]] = f"[an OAuth {name.replace('_', ' ')}]"
    return Scrubber(replacements)


def settle_failure(server: Server, user_id: int, prepared: Prepared, failure: Failure) -> Failure:
    """Scrub the user's secrets from a diagnosis; remember a server that asked for authorization."""
    failure = prepared.scrub(failure)
    if failure.kind == NEEDS_AUTH and prepared.failure is None:
        # Learned from the server itself: do not ask it again for a while, unless the user connects.
        mark_needs_auth(server.pk, owner_of(user_id), failure.message, prepared.revision)
    return failure


def settle(server: Server, user_id: int, prepared: Prepared, outcome: CallOutcome) -> CallOutcome:
    # A server that echoes its API key back must not put it in the call record or the browser.
    outcome = prepared.scrub(outcome)
    if outcome.failure is not None:
        outcome.failure = settle_failure(server, user_id, prepared, outcome.failure)
    return outcome


# -- telling every worker that credentials changed --------------------------------------------------


async def listen_for_changes(pool: Any) -> None:
    """Runs on the pool loop of every worker process: acts on credential.changed messages."""
    import asyncio

    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    # The default prefix, always: channels_redis reads all of a process's channels through one
    # key per prefix, and only one receive loop runs; a channel with another prefix is never read.
    channel = await layer.new_channel()
    while True:
        try:
            # Re-joined now and then: channel-layer groups forget members after a day.
            await layer.group_add(events.WORKERS_GROUP, channel)
            message = await asyncio.wait_for(layer.receive(channel), 3600)
        except TimeoutError:
            continue
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a channel-layer outage must not end the listener
            # Redis read timeouts on an idle blocking receive are routine; anything else is worth a line.
            quiet = "timeout" in type(exc).__name__.lower()
            log.log(logging.DEBUG if quiet else logging.WARNING, "credential change listener: %r; retrying", exc)
            await asyncio.sleep(0.2 if quiet else 1.0)
            continue
        if message.get("type") == "credential.changed":
            await close_outdated(pool, message.get("server"), message.get("owner"))


async def close_outdated(pool: Any, server_id: Any, owner: Any) -> int:
    """Close the connections that used a credential that changed; a connection opened since has
    the new revision in its key and stays."""
    from channels.db import database_sync_to_async

    if not isinstance(server_id, int):
        return 0
    keys = [key for key in pool.keys_for(server_id) if owner == EVERYONE or key.owner == owner]
    current = await database_sync_to_async(_current_fingerprints)(server_id, {key.owner for key in keys})
    outdated = [key for key in keys if current.get(key.owner) != key.fingerprint]
    for key in outdated:
        await pool.drop(key)
    if outdated:
        log.info("closed %d connection(s) after a credential change on server %s", len(outdated), server_id)
    return len(outdated)


def _current_fingerprints(server_id: int, owners: set[str]) -> dict[str, str]:
    server = Server.objects.filter(pk=server_id).first()
    if server is None:
        return {}
    base = server.to_config().fingerprint()
    # Someone who may no longer call the team's servers (removed, left, made auditor) has no current
    # fingerprint: every connection that used their credentials is outdated.
    ids = [user_id for user_id in (Owner(owner).user_id for owner in owners) if user_id is not None]
    users = set(
        Membership.objects.filter(
            team_id=server.team_id, user_id__in=ids, role__in=roles_that_may(TeamAction.USE_SERVERS)
        ).values_list("user_id", flat=True)
    )
    found = {}
    for owner in map(Owner, owners):
        if owner.user_id in users:
            found[owner] = f"{base}.{revision(applicable(server, owner.user_id))}"
        elif owner.team_id is not None and server.shared:
            found[owner] = f"{base}.{revision(list(Credential.objects.filter(server=server, team_id=server.team_id)))}"
    return found


def start_listener(pool: Any) -> None:
    pool.submit(listen_for_changes(pool))
