from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.http import urlencode

from servers.models import Role, Server, Team
from servers.permissions import describe_tools

from . import audit
from .models import AuditEvent, AuditKind, CallStatus, ToolCall

AUDIT_PAGE_ROWS = 200


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
            "described": describe_tools(s, request.user.pk),
            "transport": s.transport,
        }
        for s in servers.select_related("team__policy")
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


# -- the audit log ---------------------------------------------------------------------------


def _visible_events(user: Any) -> QuerySet[AuditEvent]:
    """Team admins see their teams' rows; everyone sees their own."""
    admin_teams = Team.objects.filter(memberships__user=user, memberships__role=Role.ADMIN)
    return AuditEvent.objects.filter(Q(user=user) | Q(team__in=admin_teams)).select_related("team")


def _day(text: str) -> date | None:
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


def _filtered(request: HttpRequest) -> tuple[QuerySet[AuditEvent], dict[str, str]]:
    params = {
        name: request.GET.get(name, "").strip()
        for name in ("user", "server", "tool", "outcome", "kind", "since", "until")
    }
    events = _visible_events(request.user)
    if params["user"]:
        events = events.filter(username=params["user"])
    if params["server"]:
        events = events.filter(server_name=params["server"])
    if params["tool"]:
        events = events.filter(tool=params["tool"])
    if params["outcome"]:
        events = events.filter(outcome=params["outcome"])
    if params["kind"]:
        events = events.filter(kind=params["kind"])
    zone = timezone.get_current_timezone()
    if since := _day(params["since"]):
        events = events.filter(at__gte=datetime.combine(since, time.min, zone))
    if until := _day(params["until"]):
        events = events.filter(at__lt=datetime.combine(until + timedelta(days=1), time.min, zone))
    return events, params


@login_required
def audit_log(request: HttpRequest) -> HttpResponse:
    events, params = _filtered(request)
    export = request.GET.get("format")
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    if export == "csv":
        response = StreamingHttpResponse(audit.csv_lines(events.iterator(chunk_size=500)), content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
        return response
    if export == "json":
        response = JsonResponse({"events": [audit.as_row(e) for e in events.iterator(chunk_size=500)]})
        response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.json"'
        return response
    is_admin = Team.objects.filter(memberships__user=request.user, memberships__role=Role.ADMIN).exists()
    query = urlencode({name: value for name, value in params.items() if value})
    return render(
        request,
        "sessions/audit.html",
        {
            "events": events[:AUDIT_PAGE_ROWS],
            "limit": AUDIT_PAGE_ROWS,
            "params": params,
            "query": query,
            "is_admin": is_admin,
            "kinds": AuditKind.choices,
            "outcomes": [*CallStatus.values, "rule_saved", "rule_pinned", "rule_deleted", "defaults_saved"],
        },
    )
