from __future__ import annotations

import json
import uuid
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from servers.models import Server

from .models import CallStatus, ToolCall

LIST_LIMIT = 200
EXPORT_LIMIT = 5000


@login_required
def playground(request: HttpRequest) -> HttpResponse:
    servers = Server.objects.visible_to(request.user).filter(enabled=True).select_related("team").distinct()
    catalog = [
        {
            "id": s.pk,
            "name": s.name,
            "team": s.team.name,
            "prefix": s.prefix,
            "tools": s.tools,
            "transport": s.transport,
        }
        for s in servers
    ]
    selected: dict[str, Any] = {"server": request.GET.get("server", ""), "tool": request.GET.get("tool", "")}
    # "Re-run" from the history: the same server, tool and arguments, ready to edit. Only one's own calls.
    rerun = _own_call(request, request.GET.get("call", ""))
    if rerun is not None and rerun.server_id is not None:
        selected.update(server=str(rerun.server_id), tool=rerun.tool, arguments=rerun.arguments)
    return render(
        request, "sessions/playground.html", {"catalog": catalog, "selected": selected, "has_servers": bool(catalog)}
    )


def _servers_page(request: HttpRequest, template: str) -> HttpResponse:
    """The Resources and Prompts tabs: the user's enabled servers; the rest comes over the WebSocket."""
    servers = Server.objects.visible_to(request.user).filter(enabled=True).select_related("team").distinct()
    catalog = [{"id": s.pk, "name": s.name, "team": s.team.name} for s in servers]
    selected = {"server": request.GET.get("server", "")}
    return render(request, template, {"catalog": catalog, "selected": selected, "has_servers": bool(catalog)})


@login_required
def playground_resources(request: HttpRequest) -> HttpResponse:
    return _servers_page(request, "sessions/resources.html")


@login_required
def playground_prompts(request: HttpRequest) -> HttpResponse:
    return _servers_page(request, "sessions/prompts.html")


def _own_call(request: HttpRequest, call_id: str) -> ToolCall | None:
    try:
        pk = uuid.UUID(call_id)
    except ValueError:  # no id, or a malformed one: no call to re-run
        return None
    return ToolCall.objects.filter(pk=pk, user=request.user).first()


def _filtered_calls(request: HttpRequest) -> tuple[QuerySet[ToolCall], dict[str, str]]:
    filters = {name: request.GET.get(name, "").strip() for name in ("server", "tool", "status")}
    calls = ToolCall.objects.filter(user=request.user)
    if filters["server"]:
        calls = calls.filter(server_name=filters["server"])
    if filters["tool"]:
        calls = calls.filter(tool=filters["tool"])
    if filters["status"]:
        calls = calls.filter(status=filters["status"])
    return calls, filters


@login_required
def call_list(request: HttpRequest) -> HttpResponse:
    calls, filters = _filtered_calls(request)
    own = ToolCall.objects.filter(user=request.user)
    choices = {
        "servers": sorted(set(own.exclude(server_name="").values_list("server_name", flat=True))),
        "tools": sorted(set(own.values_list("tool", flat=True))),
        "statuses": CallStatus.choices,
    }
    return render(
        request,
        "sessions/calls.html",
        {
            "calls": calls.select_related("server")[:LIST_LIMIT],
            "filters": filters,
            "filtered": any(filters.values()),
            "choices": choices,
            "query": request.GET.urlencode(),
            "limit": LIST_LIMIT,
        },
    )


@login_required
def call_list_export(request: HttpRequest) -> HttpResponse:
    calls, filters = _filtered_calls(request)
    records = [call.as_record() for call in calls[:EXPORT_LIMIT]]
    body = {"exported_at": timezone.now().isoformat(), "filters": filters, "limit": EXPORT_LIMIT, "calls": records}
    return _download(body, f"mcp-calls-{timezone.now():%Y%m%d-%H%M%S}.json")


@login_required
def call_detail(request: HttpRequest, call_id: str) -> HttpResponse:
    call = get_object_or_404(ToolCall, pk=call_id, user=request.user)
    details = {k: v for k, v in call.details.items() if k not in ("progress", "stderr_tail", "errors")}
    return render(
        request,
        "sessions/call.html",
        {
            "call": call,
            "arguments": json.dumps(call.arguments, indent=2),
            "result": json.dumps(call.result, indent=2) if call.result is not None else "",
            "progress": call.details.get("progress", []),
            "field_errors": call.details.get("errors", []),
            "stderr_tail": call.details.get("stderr_tail", ""),
            "other_details": json.dumps(details, indent=2) if details else "",
            "exchange": [{**m, "json": json.dumps(m["message"], indent=2)} for m in call.exchange()],
        },
    )


@login_required
def call_export(request: HttpRequest, call_id: str) -> HttpResponse:
    call = get_object_or_404(ToolCall, pk=call_id, user=request.user)
    return _download(call.as_record(), f"mcp-call-{call.pk}.json")


def _download(body: Any, filename: str) -> HttpResponse:
    response = JsonResponse(body, safe=False, json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
