"""The worker's side of OAuth: the encrypted token store each connection's provider reads and
writes. The browser authorization flow that fills it is sessions/oauth_flow.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import ValidationError

from servers.credentials.crypto import CredentialUnreadable
from servers.credentials.models import Credential, CredentialKind, ServerOAuth
from servers.models import Server

from .mcp.auth import (
    AuthorizationRequired,
    Discovery,
    OAuthClientInformationFull,
    OAuthSettings,
    OAuthToken,
    OAuthTokenError,
    PortalOAuthProvider,
    StoredAuth,
)
from .mcp.secrets import remember

log = logging.getLogger(__name__)

LEASE_SECONDS = 30.0
LEASE_POLL = 0.05


class CredentialRowStore:
    """TokenStorage over one encrypted `oauth` Credential row (a user's, or a team's)."""

    def __init__(self, server_id: int, *, user_id: int | None = None, team_id: int | None = None, fresh: bool = False):
        self.identity: dict[str, Any] = {
            "server_id": server_id,
            "user_id": user_id,
            "team_id": team_id,
            "kind": CredentialKind.OAUTH,
            "name": "",
        }
        # A fresh store (the "Connect" flow) ignores an unreadable row: connecting again replaces it.
        self.fresh = fresh

    # -- reading ----------------------------------------------------------------------------

    def _payload(self) -> dict[str, Any]:
        row = Credential.objects.filter(**self.identity).first()
        if row is None:
            return {}
        try:
            return row.open_json()
        except CredentialUnreadable as exc:
            if self.fresh:
                return {}
            raise AuthorizationRequired(str(exc)) from None

    @database_sync_to_async
    def load(self) -> StoredAuth:
        data = self._payload()
        stored = StoredAuth(
            discovery=Discovery.from_json(data.get("discovery")), required_scope=data.get("required_scope")
        )
        try:
            if data.get("tokens"):
                stored.tokens = OAuthToken.model_validate(data["tokens"])
                stored.expires_at = data.get("expires_at")
                remember(
                    {"access_token": stored.tokens.access_token, "refresh_token": stored.tokens.refresh_token or ""}
                )
            if data.get("client_info"):
                stored.client_info = OAuthClientInformationFull.model_validate(data["client_info"])
        except ValidationError:
            stored.tokens = stored.client_info = None
        return stored

    async def get_tokens(self) -> OAuthToken | None:
        return (await self.load()).tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return (await self.load()).client_info

    # -- writing: short transactions, read-modify-write of the sealed JSON ---------------------

    def _update(self, change: Any) -> None:
        with transaction.atomic():
            row = Credential.objects.select_for_update().filter(**self.identity).first()
            payload: dict[str, Any] = {}
            if row is None:
                row = Credential(**self.identity)
            else:
                try:
                    payload = row.open_json()
                except CredentialUnreadable:
                    payload = {}  # replaced by what is written now
            change(payload, row)
            row.seal(json.dumps(payload))
            row.save()

    @database_sync_to_async
    def set_tokens(self, tokens: OAuthToken) -> None:
        def change(payload: dict[str, Any], row: Credential) -> None:
            remember({"access_token": tokens.access_token, "refresh_token": tokens.refresh_token or ""})
            payload["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
            expires_at = time.time() + int(tokens.expires_in) if tokens.expires_in is not None else None
            payload["expires_at"] = expires_at
            row.has_tokens = True
            row.expires_at = timezone.now() + timedelta(seconds=int(tokens.expires_in)) if expires_at else None
            row.scope = (tokens.scope or "")[:2000]
            row.last_error = ""

        self._update(change)

    @database_sync_to_async
    def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        def change(payload: dict[str, Any], row: Credential) -> None:
            payload["client_info"] = client_info.model_dump(mode="json", exclude_none=True)

        self._update(change)

    @database_sync_to_async
    def forget_client(self) -> None:
        def change(payload: dict[str, Any], row: Credential) -> None:
            payload.pop("client_info", None)
            payload.pop("sent_unanswered", None)

        if Credential.objects.filter(**self.identity).exists():
            self._update(change)

    @database_sync_to_async
    def note_sent(self, sent: bool) -> None:
        """Note that the browser went to the authorization page with the stored registration (True),
        or came back (False). A server that does not know the client shows its own error page and
        never sends the browser back; a person who left the page costs one registration more."""

        def change(payload: dict[str, Any], row: Credential) -> None:
            if sent:
                payload["sent_unanswered"] = True
            else:
                payload.pop("sent_unanswered", None)

        if Credential.objects.filter(**self.identity).exists():  # an admin's client ID needs no row
            self._update(change)

    @database_sync_to_async
    def sent_unanswered(self) -> bool:
        return bool(self._payload().get("sent_unanswered"))

    @database_sync_to_async
    def save_discovery(self, discovery: Discovery, *, refreshed: bool) -> None:
        def change(payload: dict[str, Any], row: Credential) -> None:
            payload["discovery"] = discovery.to_json()
            if refreshed:
                row.refreshed_at = timezone.now()
            else:
                row.authorized_at = timezone.now()
                payload.pop("required_scope", None)

        self._update(change)

    @database_sync_to_async
    def grant_lost(self, error: str) -> None:
        def change(payload: dict[str, Any], row: Credential) -> None:
            payload.pop("tokens", None)
            payload.pop("expires_at", None)
            row.has_tokens, row.expires_at, row.last_error = False, None, error[:500]

        self._update(change)

    @database_sync_to_async
    def note_required_scope(self, scope: str | None) -> None:
        def change(payload: dict[str, Any], row: Credential) -> None:
            if scope:
                payload["required_scope"] = scope

        if Credential.objects.filter(**self.identity).exists() or scope:
            self._update(change)

    # -- single-flight refresh ------------------------------------------------------------------

    @database_sync_to_async
    def _acquire(self, holder: str) -> bool | None:
        now = timezone.now()
        rows = Credential.objects.filter(**self.identity)
        if not rows.exists():
            return None  # nothing stored, nothing to refresh
        return (
            rows.filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now)).update(
                lease_holder=holder, lease_until=now + timedelta(seconds=LEASE_SECONDS)
            )
            == 1
        )

    @database_sync_to_async
    def _release(self, holder: str) -> None:
        Credential.objects.filter(**self.identity, lease_holder=holder).update(lease_holder="", lease_until=None)

    @asynccontextmanager
    async def refresh_lease(self) -> AsyncIterator[None]:
        """One refresh at a time per credential, across every worker process (a row lease)."""
        holder = uuid.uuid4().hex
        deadline = time.monotonic() + LEASE_SECONDS
        while True:
            acquired = await self._acquire(holder)
            if acquired is None:
                yield
                return
            if acquired:
                break
            if time.monotonic() > deadline:
                raise OAuthTokenError("another refresh of this credential is taking too long")
            await asyncio.sleep(LEASE_POLL)
        try:
            yield
        finally:
            await self._release(holder)


def oauth_settings_for(server: Server) -> OAuthSettings | None:
    """The provider's settings, or None when the admin turned OAuth off (or the transport has none)."""
    if server.transport == "stdio":
        return None
    try:
        row: ServerOAuth | None = server.oauth  # loaded with the call in the worker (select_related)
    except ServerOAuth.DoesNotExist:
        row = None
    if row is not None and not row.enabled:
        return None
    base = OAuthSettings(
        redirect_uri=settings.PORTAL_OAUTH_REDIRECT_URI,
        client_metadata_url=settings.PORTAL_OAUTH_CLIENT_METADATA_URL,
        refresh_ahead=settings.PORTAL_OAUTH_REFRESH_AHEAD_SECONDS,
        refresh_jitter=settings.PORTAL_OAUTH_REFRESH_JITTER_SECONDS,
    )
    if row is None:
        return base
    return dataclasses.replace(
        base,
        client_id=row.client_id,
        client_secret=row.client_secret(),
        token_endpoint_auth_method=row.token_endpoint_auth_method,
        metadata_url=row.metadata_url,
        scope=row.scope,
    )


def store_for(server: Server, user_id: int, rows: list[Credential], for_team: bool = False) -> CredentialRowStore:
    """The user's own OAuth credential; the team's when the user has none and the team has one."""
    if for_team:
        return CredentialRowStore(server.pk, team_id=server.team_id, fresh=True)
    own = any(r.kind == CredentialKind.OAUTH and r.user_id == user_id for r in rows)
    shared = any(r.kind == CredentialKind.OAUTH and r.team_id is not None and r.has_tokens for r in rows)
    if not own and shared:
        return CredentialRowStore(server.pk, team_id=server.team_id)
    return CredentialRowStore(server.pk, user_id=user_id)


def attach_provider(config: Any, server: Server, user_id: int, rows: list[Credential]) -> Any:
    """The config with a non-interactive OAuth provider for this user (tool calls, listing, tests)."""
    oauth = oauth_settings_for(server)
    if oauth is None:
        return config
    provider = PortalOAuthProvider(config.url, oauth, store_for(server, user_id, rows))
    return dataclasses.replace(config, auth=provider)


# -- the browser flow ----------------------------------------------------------------------------
