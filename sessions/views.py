from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from servers.models import Server

from .mcp.naming import annotate_tools
from .models import ToolCall


@login_required
def playground(request: HttpRequest) -> HttpResponse:
    servers = Server.objects.visible_to(request.user).filter(enabled=True).select_related("team").distinct()
    catalog = [
        {
            "id": s.pk,
            "name": s.name,
            "team": s.team.name,
            "prefix": s.prefix,
            # Summaries for the list (descriptions cut at 2,048 characters); the pane shows the full text.
            "tools": annotate_tools(s.name, s.tools),
            "transport": s.transport,
        }
        for s in servers
    ]
    selected = {"server": request.GET.get("server", ""), "tool": request.GET.get("tool", "")}
    return render(
        request, "sessions/playground.html", {"catalog": catalog, "selected": selected, "has_servers": bool(catalog)}
    )


@login_required
def call_list(request: HttpRequest) -> HttpResponse:
    calls = ToolCall.objects.filter(user=request.user).select_related("server")[:200]
    return render(request, "sessions/calls.html", {"calls": calls})


@login_required
def call_detail(request: HttpRequest, call_id: str) -> HttpResponse:
    call = get_object_or_404(ToolCall, pk=call_id, user=request.user)
    return render(request, "sessions/call.html", {"call": call})
