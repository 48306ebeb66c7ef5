"""Connect an agent: the person's access tokens for the portal's MCP endpoint, and how to use them.

A new token's text is in the POST response that made it and nowhere else: not in a URL, not in a
redirect, not in the session, not cached (docs/mcp-endpoint.md).
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from servers.models import Server

from . import agent_setup
from .access_tokens import TokenError, do_create_token, do_revoke_token
from .agent_forms import AccessTokenForm
from .gateway import server_paths
from .models import AccessToken
from .oauth_server import oauth_clients_for


@login_required
def connect_agent(request: HttpRequest) -> HttpResponse:
    form = AccessTokenForm(request.user, request.POST or None)
    created: tuple[AccessToken, str] | None = None
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            created = do_create_token(request.user, data["name"], list(data["servers"]), data["expires_days"])
        except TokenError as exc:
            form.add_error(None, str(exc))
        else:
            form = AccessTokenForm(request.user)
    response = render(request, "sessions/connect_agent.html", _context(request, form, created))
    if request.method == "POST":
        # The page may hold a token's only copy: no cache, back button or proxy keeps it.
        response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def revoke_token(request: HttpRequest, token_id: int) -> HttpResponse:
    try:
        token = do_revoke_token(request.user, token_id)
    except TokenError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Revoked {token.name} ({token.prefix}…): agents using it are refused from now on.")
    return redirect("connect_agent")


def _context(request: HttpRequest, form: AccessTokenForm, created: tuple[AccessToken, str] | None) -> dict[str, Any]:
    url = request.build_absolute_uri("/mcp/")
    servers = Server.objects.usable_by(request.user).select_related("team").order_by("name")
    return {
        "form": form,
        "tokens": AccessToken.objects.filter(user=request.user).prefetch_related("servers"),
        "created": created[0] if created else None,
        "created_text": created[1] if created else "",
        "endpoint_url": url,
        "snippets": agent_setup.snippets(url, created[1] if created else ""),
        "oauth_clients": oauth_clients_for(request.user),
        # The names the endpoint gives them (two servers of one name in two teams get two paths).
        "server_endpoints": [
            (n.server, request.build_absolute_uri(f"/mcp/{n.path}/")) for n in server_paths(list(servers))
        ],
    }
