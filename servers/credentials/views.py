"""My credentials, token health, the OAuth connect and callback, and the admin's OAuth settings.

Pages show names, kinds, "set"/"not set", scopes and expiry: never a value. What is decided and
written (who may do what, what a server needs, the OAuth flow claimed by its callback) is in
servers/credentials/actions.py; these views parse the request, call it and answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from portal.origin import redirect_uri_mismatch
from sessions import queue

from . import actions
from .forms import OAuthSettingsForm, SecretForm
from .models import Credential, CredentialKind


def _safe_next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next") or request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return target
    return default


@login_required
def my_credentials(request: HttpRequest) -> HttpResponse:
    entries = actions.my_credential_needs(request.user)
    return render(
        request,
        "servers/credentials.html",
        {
            "entries": entries,
            "attention": sum(1 for e in entries if e["attention"]),
            "form": SecretForm(),
            # Admins are told when consent would send people back to another address than this one.
            "address_notice": redirect_uri_mismatch(request)
            if any(e["is_admin"] and e["uses_oauth"] for e in entries)
            else None,
        },
    )


@login_required
@require_POST
def set_secret(request: HttpRequest, server_id: int) -> HttpResponse:
    server = get_object_or_404(actions.credential_servers(request.user), pk=server_id)
    form = SecretForm(request.POST)
    back = _safe_next(request, reverse("my_credentials") + f"#server-{server.pk}")
    if not form.is_valid():
        messages.error(request, " ".join(e for errors in form.errors.values() for e in errors))
        return redirect(back)
    data = form.cleaned_data
    try:
        actions.do_save_secret(server, data["name"], data["value"], by=request.user, for_team=data["for_team"])
    except actions.CredentialError as exc:
        messages.error(request, str(exc))
        return redirect(back)
    whose = "the team's" if data["for_team"] else "your"
    messages.success(request, f"Saved {whose} {data['name']} for {server.name}.")
    return redirect(back)


@login_required
@require_POST
def revoke_credential(request: HttpRequest, credential_id: int) -> HttpResponse:
    credential = get_object_or_404(Credential.objects.select_related("server"), pk=credential_id)
    if not actions.may_revoke(credential, request.user):
        return HttpResponse("Not yours to revoke.", status=404)
    what = credential.name if credential.kind == CredentialKind.SECRET else "OAuth connection"
    actions.do_revoke_credential(credential)
    messages.success(request, f"Removed the {what} for {credential.server.name}; its connections are closed.")
    return redirect(_safe_next(request, reverse("my_credentials")))


@login_required
def token_health(request: HttpRequest) -> HttpResponse:
    tokens, team_tokens = actions.oauth_tokens(request.user)
    return render(request, "servers/token_health.html", {"tokens": tokens, "team_tokens": team_tokens})


@login_required
def oauth_settings(request: HttpRequest, server_id: int) -> HttpResponse:
    server = get_object_or_404(actions.credential_servers(request.user), pk=server_id)
    if not server.is_admin(request.user):
        return HttpResponse("Only the team's admins can change OAuth settings.", status=403)
    instance = actions.oauth_settings_of(server)
    form = OAuthSettingsForm(request.POST or None, instance=instance)
    if request.method == "POST" and form.is_valid():
        actions.do_set_oauth_settings(server, form.cleaned_data)
        messages.success(request, f"Saved the OAuth settings of {server.name}.")
        return redirect("server_detail", server_id=server.pk)
    return render(request, "servers/oauth_settings.html", {"server": server, "form": form, "instance": instance})


def client_metadata(request: HttpRequest) -> JsonResponse:
    """The portal's OAuth client ID metadata document (used as client_id where servers support it)."""
    return JsonResponse(
        {
            "client_id": settings.PORTAL_OAUTH_CLIENT_METADATA_URL or request.build_absolute_uri(),
            "client_name": "MCP Portal",
            "client_uri": settings.SITE_URL,
            "redirect_uris": [settings.PORTAL_OAUTH_REDIRECT_URI],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "web",
        }
    )


# -- OAuth: Connect, and the callback ----------------------------------------------------------------


@asynccontextmanager
async def _reply_layer() -> AsyncIterator[Any]:
    """A channel layer to receive one reply on.

    channels_redis keeps one receive lock per layer instance, bound to the event loop that first
    used it; a view's loop is not the consumers' (in tests each request even has its own), so a
    view that waits for a reply uses an instance of its own. The embedded layer is shared memory:
    it must be the one instance, and is safe across loops.
    """
    from channels.layers import channel_layers

    # The embedded layer is only this mode's.
    from portal.channel_layer import EmbeddedChannelLayer

    shared = get_channel_layer()
    if isinstance(shared, EmbeddedChannelLayer):
        yield shared
        return
    layer = channel_layers.make_backend("default")
    try:
        yield layer
    finally:
        await layer.close_pools()


async def _wait(layer: Any, channel: str, seconds: float) -> dict[str, Any] | None:
    try:
        return await asyncio.wait_for(layer.receive(channel), seconds)
    except TimeoutError:
        return None


def _after(request: HttpRequest, message: dict[str, Any] | None, back: str, server_name: str = "") -> HttpResponse:
    if message is None:
        messages.error(request, "No worker answered in time. Try again in a moment.")
    elif message.get("type") == "oauth.redirect":
        # Off to the authorization server's page (another one, for a step-up).
        if request.method == "POST":
            # A form's redirect to another origin is blocked by the CSP's form-action 'self'
            # (browsers check every hop); a page that navigates on its own is not a form submission.
            context = {"url": message["url"], "server_name": server_name or "the server"}
            response = render(request, "servers/oauth_redirect.html", context)
            response["Cache-Control"] = "no-store"
            return response
        return HttpResponseRedirect(message["url"])
    elif message.get("ok"):
        messages.success(request, message.get("message", "Connected."))
    else:
        messages.error(request, message.get("message", "The connection failed."))
    return redirect(back)


@login_required
@require_POST
async def oauth_connect(request: HttpRequest, server_id: int) -> HttpResponse:
    """Start an authorization in a worker; follow it to the server's authorization page."""
    user = await request.auser()
    back = _safe_next(request, reverse("my_credentials") + f"#server-{server_id}")
    server = await database_sync_to_async(actions.credential_server)(user, server_id)
    if server is None:
        return HttpResponse("Unknown server.", status=404)
    try:
        flow = await database_sync_to_async(actions.do_start_oauth_flow)(
            server, user, back, settings.PORTAL_OAUTH_FLOW_SECONDS, for_team=bool(request.POST.get("for_team"))
        )
    except actions.CredentialError as exc:
        messages.error(request, str(exc))
        return redirect(back)
    async with _reply_layer() as layer:
        reply = await layer.new_channel()
        # Any worker: the flow opens a connection of its own, not a pooled session.
        await database_sync_to_async(queue.send)("sessions.authorize_server", (flow.pk, reply))
        # Discovery and registration happen before the authorization URL exists.
        answer = await _wait(layer, reply, settings.MCP_CONNECT_TIMEOUT + 15)
    # Rendering reads the session and the user: sync code.
    return await database_sync_to_async(_after)(request, answer, back, server.name)


@login_required
async def oauth_callback(request: HttpRequest) -> HttpResponse:
    """Where the authorization server sends the browser back; hands the code to the waiting worker."""
    user = await request.auser()
    params = request.GET
    claimed = await database_sync_to_async(actions.do_claim_oauth_flow)(user, params.get("state", ""))
    if claimed is None:
        messages.error(request, "This sign-in link has expired or was already used. Connect again.")
        return redirect("my_credentials")
    flow, channel = claimed
    answer = {name: params[name] for name in ("code", "state", "iss", "error", "error_description") if name in params}
    async with _reply_layer() as layer:
        reply = await layer.new_channel()
        await layer.send(channel, {"type": "oauth.callback", "reply": reply, **answer})
        # The worker exchanges the code and completes the handshake before it answers.
        outcome = await _wait(layer, reply, settings.MCP_CONNECT_TIMEOUT + 30)
    return await database_sync_to_async(_after)(request, outcome, flow.return_to or "my_credentials")
