"""The worker's side of OAuth: the encrypted token store, and the browser authorization flow.

The flow's secrets (PKCE verifier, state) live only in the coroutine that waits for the
callback, in whichever worker process started it. The OAuthFlow row maps a hash of the
state to that coroutine's channel (encrypted), so the callback reaching any web process
is routed to it over the channel layer (docs/credentials.md).
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken
from pydantic import ValidationError

from servers.credential_models import Credential, CredentialKind, OAuthFlow, ServerOAuth, hash_state
from servers.crypto import CredentialUnreadable
from servers.models import Server
from servers.oauth_errors import AuthorizationError

from .mcp.auth import (
    AuthorizationRefused,
    AuthorizationRequired,
    Discovery,
    OAuthFlowError,
    OAuthSettings,
    OAuthTokenError,
    PortalOAuthProvider,
    StoredAuth,
)
from .mcp.errors import ConnectionFailed
from .mcp.pool import Connection
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


class BrowserAuthorization:
    """redirect_handler and callback_handler for one OAuthFlow, over the channel layer."""

    def __init__(self, flow_id: int, reply_channel: str):
        self.flow_id = flow_id
        self.store: CredentialRowStore | None = None  # set once the flow's owner is known
        self.reply_channel = reply_channel  # who to tell next: the Connect view, later the callback view
        self.channel: str | None = None
        self.redirected = False
        self.provider_error: AuthorizationError | None = None  # what the server said on the callback

    async def redirect(self, url: str) -> None:
        layer = get_channel_layer()
        if self.channel is None:
            self.channel = await layer.new_channel()
        state = parse_qs(urlparse(url).query).get("state", [""])[0]
        await self._record_waiting(hash_state(state), self.channel)
        if self.store is not None:
            await self.store.note_sent(True)
        self.redirected = True
        await layer.send(self.reply_channel, {"type": "oauth.redirect", "url": url})

    @database_sync_to_async
    def _record_waiting(self, state_hash: str, channel: str) -> None:
        flow = OAuthFlow.objects.get(pk=self.flow_id)
        flow.state_hash = state_hash
        flow.set_channel(channel)
        flow.status = OAuthFlow.Status.WAITING
        flow.expires_at = timezone.now() + timedelta(seconds=settings.PORTAL_OAUTH_FLOW_SECONDS)
        flow.save(update_fields=["state_hash", "channel_ciphertext", "channel_key_id", "status", "expires_at"])

    async def callback(self) -> AuthorizationCodeResult:
        assert self.channel is not None
        try:
            message = await asyncio.wait_for(
                get_channel_layer().receive(self.channel), timeout=settings.PORTAL_OAUTH_FLOW_SECONDS
            )
        except TimeoutError:
            raise OAuthFlowError("no answer from the authorization page within the time allowed") from None
        if self.store is not None:
            await self.store.note_sent(False)  # the server knew the client well enough to send the browser back
        if message.get("reply"):
            self.reply_channel = message["reply"]
        if message.get("error"):
            # Text from the server, through the browser: kept short, shown escaped.
            self.provider_error = AuthorizationError(
                str(message["error"])[:100], str(message.get("error_description") or "")[:300]
            )
            description = self.provider_error.description
            raise AuthorizationRefused(f"the authorization server answered {message['error']} {description}".strip())
        return AuthorizationCodeResult(code=message.get("code", ""), state=message.get("state"), iss=message.get("iss"))


@database_sync_to_async
def _load_flow(flow_id: int) -> tuple[OAuthFlow, Server, Any]:
    from sessions.credentials import applicable, prepare

    flow = OAuthFlow.objects.select_related("server", "user").get(pk=flow_id)
    server = flow.server
    rows = applicable(server, flow.user_id)
    prepared = prepare(server, flow.user_id, with_oauth=False, connecting=True)
    return flow, server, (prepared, rows)


@database_sync_to_async
def _finish_flow(flow_id: int, ok: bool, error: str, server_id: int, owner: str, tools: list | None) -> None:
    from servers import actions as server_actions
    from servers.credential_actions import _announce_change

    OAuthFlow.objects.filter(pk=flow_id).update(
        status=OAuthFlow.Status.DONE if ok else OAuthFlow.Status.FAILED, error=error[:500]
    )
    if ok:
        identity = {"user_id": int(owner[5:])} if owner.startswith("user:") else {"team_id": int(owner[5:])}
        # A new generation: every worker's connection with the old tokens is closed and reopened.
        Credential.objects.filter(server_id=server_id, kind=CredentialKind.OAUTH, name="", **identity).update(
            generation=F("generation") + 1
        )
        if tools is not None:
            from sessions.credentials import team_scrubber

            # Stored team-wide: no member's credential may be in it (docs/security.md).
            server_actions.do_record_tools(server_id, team_scrubber(server_id)(tools))
        _announce_change(server_id, owner if owner.startswith("user:") else "*")


async def run_authorization(flow_id: int, reply_channel: str) -> dict[str, Any]:
    """Connect one user's (or team's) account to a server, from "Connect" to stored tokens."""
    layer = get_channel_layer()
    browser = BrowserAuthorization(flow_id, reply_channel)
    outcome: dict[str, Any]
    try:
        flow, server, (prepared, rows) = await _load_flow(flow_id)
    except OAuthFlow.DoesNotExist:
        await layer.send(reply_channel, {"type": "oauth.done", "ok": False, "message": "This sign-in has expired."})
        return {"ok": False}
    owner = f"team:{server.team_id}" if flow.for_team else f"user:{flow.user_id}"
    tools = None
    if prepared.failure is not None:
        outcome = {"ok": False, "message": prepared.failure.message}
    else:
        oauth = await database_sync_to_async(oauth_settings_for)(server)
        if oauth is None:
            outcome = {"ok": False, "message": f"OAuth is turned off for {server.name}."}
        else:
            store = (
                CredentialRowStore(server.pk, team_id=server.team_id, fresh=True)
                if flow.for_team
                else CredentialRowStore(server.pk, user_id=flow.user_id, fresh=True)
            )
            if await store.sent_unanswered():
                # The last Connect sent the browser off with this registration and nothing came
                # back (the server may have shown "unknown client"): register again.
                log.info("OAuth: the last authorization for %s never came back; registering again", server.name)
                await store.forget_client()
            browser.store = store
            provider = PortalOAuthProvider(
                prepared.config.url,
                oauth,
                store,
                redirect_handler=browser.redirect,
                callback_handler=browser.callback,
                force_authorization=True,
            )
            config = dataclasses.replace(
                prepared.config,
                auth=provider,
                connect_timeout=prepared.config.connect_timeout + settings.PORTAL_OAUTH_FLOW_SECONDS,
            )
            conn = Connection(key=None, config=config)
            try:
                await conn.open()
                tools = prepared.scrub(await conn.list_tools())
                outcome = {"ok": True, "message": f"Connected your account to {server.name}."}
                if not browser.redirected:
                    outcome["message"] = f"{server.name} did not ask for authorization: nothing to connect."
            except ConnectionFailed as exc:
                outcome = {"ok": False, "message": prepared.redact(exc.failure.message)}
            except Exception as exc:  # noqa: BLE001 - the person waiting must hear how it ended
                failure = conn.diagnose(exc)
                outcome = {"ok": False, "message": prepared.redact(failure.message)}
            finally:
                await conn.close()
            refused = browser.provider_error
            if refused is not None and not outcome["ok"]:
                log.info("OAuth: %s answered the authorization with %s", server.name, refused.error)
                if refused.registration_refused() and not oauth.client_id:
                    # Registered again on the next Connect, for the redirect URI the portal has now.
                    await store.forget_client()
                message = refused.explain(server.name, oauth.redirect_uri, configured_client=bool(oauth.client_id))
                outcome = {"ok": False, "message": prepared.redact(message)}
    await _finish_flow(flow_id, outcome["ok"], "" if outcome["ok"] else outcome["message"], server.pk, owner, tools)
    await layer.send(browser.reply_channel, {"type": "oauth.done", **outcome})
    return outcome


def start_authorization(flow_id: int, reply_channel: str) -> None:
    """Run the flow on this worker's pool loop; the task's thread is free again at once."""
    from .worker import get_pool

    # A clean context: when the task runs eagerly inside a view, asgiref's per-request executor
    # must not follow the coroutine onto the pool loop (it would be gone by the time it is used).
    future = contextvars.Context().run(get_pool().submit, run_authorization(flow_id, reply_channel))
    future.add_done_callback(_log_crash)


def _log_crash(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("OAuth authorization flow crashed", exc_info=future.exception())
