from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
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


@login_required
def call_full_output(request: HttpRequest, call_id: str) -> HttpResponse:
    """The whole output of a call whose shown result was truncated; only its owner may have it."""
    call = get_object_or_404(ToolCall.objects.defer("result"), pk=call_id, user=request.user)
    if call.full_output is None:
        raise Http404("This call's output was not truncated.")
    response = HttpResponse(bytes(call.full_output), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="call-{call.pk}-output.json"'
    return response
