"""The browser authorization flow ("Connect"): discovery, registration, the user's consent, tokens.

Runs on a worker's pool loop. The flow's secrets (PKCE verifier, state) live only in the coroutine
that waits for the callback, in whichever worker process started it. The OAuthFlow row maps a hash
of the state to that coroutine's channel (encrypted), so the callback reaching any web process is
routed to it over the channel layer (docs/credentials.md). The token store is sessions/oauth.py.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlparse

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db.models import F
from django.utils import timezone

from servers import actions as server_actions
from servers.credentials.actions import _announce_change
from servers.credentials.models import Credential, CredentialKind, OAuthFlow, hash_state
from servers.credentials.oauth_errors import AuthorizationError
from servers.models import Server

from .credentials import applicable, prepare, team_scrubber
from .mcp.auth import (
    AuthorizationCodeResult,
    AuthorizationRefused,
    OAuthFlowError,
    PortalOAuthProvider,
)
from .mcp.failure import ConnectionFailed
from .mcp.owner import EVERYONE, Owner
from .mcp.pool import Connection
from .oauth import CredentialRowStore, oauth_settings_for
from .worker import get_pool

log = logging.getLogger(__name__)


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
    flow = OAuthFlow.objects.select_related("server", "user").get(pk=flow_id)
    server = flow.server
    rows = applicable(server, flow.user_id)
    prepared = prepare(server, flow.user_id, with_oauth=False, connecting=True)
    return flow, server, (prepared, rows)


@database_sync_to_async
def _finish_flow(flow_id: int, ok: bool, error: str, server_id: int, owner: str, tools: list | None) -> None:
    OAuthFlow.objects.filter(pk=flow_id).update(
        status=OAuthFlow.Status.DONE if ok else OAuthFlow.Status.FAILED, error=error[:500]
    )
    if ok:
        owner = Owner(owner)
        identity = {"user_id": owner.user_id} if owner.user_id is not None else {"team_id": owner.team_id}
        # A new generation: every worker's connection with the old tokens is closed and reopened.
        Credential.objects.filter(server_id=server_id, kind=CredentialKind.OAUTH, name="", **identity).update(
            generation=F("generation") + 1
        )
        if tools is not None:
            # Stored team-wide: no member's credential may be in it (docs/security.md).
            server_actions.do_record_tools(server_id, team_scrubber(server_id)(tools))
        _announce_change(server_id, owner if owner.user_id is not None else EVERYONE)


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
    owner = Owner.team(server.team_id) if flow.for_team else Owner.user(flow.user_id)
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
    # A clean context: when the task runs eagerly inside a view, asgiref's per-request executor
    # must not follow the coroutine onto the pool loop (it would be gone by the time it is used).
    future = contextvars.Context().run(get_pool().submit, run_authorization(flow_id, reply_channel))
    future.add_done_callback(_log_crash)


def _log_crash(future: Any) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("OAuth authorization flow crashed", exc_info=future.exception())
