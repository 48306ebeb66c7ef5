from __future__ import annotations

import json
import uuid
from datetime import date, datetime, time, timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.http import urlencode

from portal.apps_origin import apps_origin
from portal.middleware import content_security_policy_with_frame_src
from servers.models import Membership, Server
from servers.permissions import describe_tools, teams_where
from servers.roles import TeamAction
from servers.views import team_required

from . import audit
from .mcp.naming import annotate_tools
from .models import AuditEvent, AuditKind, CallStatus, ToolCall, Via

LIST_LIMIT = 200
EXPORT_LIMIT = 5000
AUDIT_PAGE_ROWS = 200
TASK_LIST_LIMIT = 100


@team_required
def playground(request: HttpRequest) -> HttpResponse:
    # The servers the person may call: an auditor's teams add none (servers/roles.py).
    servers = Server.objects.usable_by(request.user).filter(enabled=True).select_related("team").distinct()
    catalog = [
        {
            "id": s.pk,
            "name": s.name,
            "team": s.team.name,
            "prefix": s.prefix,
            # Summaries for the list (descriptions cut at 2,048 characters); the pane shows the full text.
            "tools": annotate_tools(s.name, s.tools),
            "described": describe_tools(s, request.user.pk),
            "transport": s.transport,
        }
        for s in servers.select_related("team__policy")
    ]
    selected: dict[str, Any] = {"server": request.GET.get("server", ""), "tool": request.GET.get("tool", "")}
    # "Re-run" from the history: the same server, tool and arguments, ready to edit. Only one's own calls.
    rerun = _own_call(request, request.GET.get("call", ""))
    if rerun is not None and rerun.server_id is not None:
        selected.update(server=str(rerun.server_id), tool=rerun.tool, arguments=rerun.arguments)
    # MCP Apps run framed from their own origin (portal/apps_origin.py), the only frame the page allows.
    apps = apps_origin()
    response = render(
        request,
        "sessions/playground.html",
        {"catalog": catalog, "selected": selected, "has_servers": bool(catalog), "apps_origin": apps},
    )
    if apps:
        response.headers["Content-Security-Policy"] = content_security_policy_with_frame_src(apps)
    return response


def _servers_page(request: HttpRequest, template: str) -> HttpResponse:
    """The Resources and Prompts tabs: the user's enabled servers; the rest comes over the WebSocket."""
    servers = Server.objects.usable_by(request.user).filter(enabled=True).select_related("team").distinct()
    catalog = [{"id": s.pk, "name": s.name, "team": s.team.name} for s in servers]
    selected = {"server": request.GET.get("server", "")}
    return render(request, template, {"catalog": catalog, "selected": selected, "has_servers": bool(catalog)})


@team_required
def playground_resources(request: HttpRequest) -> HttpResponse:
    return _servers_page(request, "sessions/resources.html")


@team_required
def playground_prompts(request: HttpRequest) -> HttpResponse:
    return _servers_page(request, "sessions/prompts.html")


def _own_call(request: HttpRequest, call_id: str) -> ToolCall | None:
    try:
        pk = uuid.UUID(call_id)
    except ValueError:  # no id, or a malformed one: no call to re-run
        return None
    return ToolCall.objects.filter(pk=pk, user=request.user).first()


def _readable_calls(user: Any) -> QuerySet[ToolCall]:
    """One's own calls, and an auditor's teams' calls (servers/roles.py: READ_TEAM_CALLS)."""
    teams = teams_where(user, TeamAction.READ_TEAM_CALLS)
    return ToolCall.objects.filter(Q(user=user) | Q(server__team__in=teams))


def mark_former_members(rows: list[Any], team_of: Any) -> list[Any]:
    """Give each row `.former_member`: its person is no longer in the row's team (removed or left).
    Their rows stay; pages say so next to the name."""
    pairs = {(team_of(row), row.user_id) for row in rows if team_of(row) and row.user_id}
    teams, users = {t for t, _ in pairs}, {u for _, u in pairs}
    current = set(Membership.objects.filter(team_id__in=teams, user_id__in=users).values_list("team_id", "user_id"))
    for row in rows:
        row.former_member = bool(team_of(row) and row.user_id) and (team_of(row), row.user_id) not in current
    return rows


# "Came from": the playground, agents through the portal's MCP endpoint, or MCP Apps in the playground (Via); "" is all.
CAME_FROM = (
    ("", "All"),
    (Via.PLAYGROUND, "Playground"),
    (Via.MCP, "Agents (MCP endpoint)"),
    (Via.APP, "MCP Apps in the playground"),
)


def _filtered_calls(request: HttpRequest) -> tuple[QuerySet[ToolCall], dict[str, str], str]:
    """The calls the filters select, the filters as applied, and a `via` value that was not applied
    (a hand-edited or stale link): the page says so rather than showing nothing."""
    filters = {name: request.GET.get(name, "").strip() for name in ("server", "tool", "status", "via")}
    ignored = ""
    if filters["via"] not in Via.values:
        ignored, filters["via"] = filters["via"], ""
    calls = _readable_calls(request.user)
    if filters["server"]:
        calls = calls.filter(server_name=filters["server"])
    if filters["tool"]:
        calls = calls.filter(tool=filters["tool"])
    if filters["status"]:
        calls = calls.filter(status=filters["status"])
    if filters["via"]:
        calls = calls.filter(via=filters["via"])
    # The token's name is shown beside an agent's call: one join, not a query a row.
    return calls.select_related("access_token"), filters, ignored


@login_required
def call_list(request: HttpRequest) -> HttpResponse:
    calls, filters, ignored_via = _filtered_calls(request)
    own = _readable_calls(request.user)
    shown = mark_former_members(
        list(calls.select_related("server", "user")[:LIST_LIMIT]), lambda c: c.server.team_id if c.server else None
    )
    choices = {
        "servers": sorted(set(own.exclude(server_name="").values_list("server_name", flat=True))),
        "tools": sorted(set(own.values_list("tool", flat=True))),
        "statuses": CallStatus.choices,
        "came_from": CAME_FROM,
    }
    return render(
        request,
        "sessions/calls.html",
        {
            "calls": shown,
            "team_reader": teams_where(request.user, TeamAction.READ_TEAM_CALLS).exists(),
            "filters": filters,
            "filtered": any(filters.values()),
            "ignored_via": ignored_via,
            "choices": choices,
            "query": request.GET.urlencode(),
            "limit": LIST_LIMIT,
        },
    )


@login_required
def call_list_export(request: HttpRequest) -> HttpResponse:
    calls, filters, _ = _filtered_calls(request)
    records = [call.as_record() for call in calls[:EXPORT_LIMIT]]
    body = {"exported_at": timezone.now().isoformat(), "filters": filters, "limit": EXPORT_LIMIT, "calls": records}
    return _download(body, f"mcp-calls-{timezone.now():%Y%m%d-%H%M%S}.json")


@login_required
def task_list(request: HttpRequest) -> HttpResponse:
    """The person's own calls that ran as MCP tasks, newest first: where each task stands."""
    calls = (
        ToolCall.objects.filter(user=request.user)
        .exclude(task={})
        .only("id", "server_name", "tool", "status", "task", "as_task", "created_at")
        .order_by("-created_at")[:TASK_LIST_LIMIT]
    )
    return render(request, "sessions/tasks.html", {"calls": calls, "limit": TASK_LIST_LIMIT})


@login_required
def call_detail(request: HttpRequest, call_id: str) -> HttpResponse:
    call = get_object_or_404(_readable_calls(request.user).select_related("access_token"), pk=call_id)
    shown_apart = ("progress", "stderr_tail", "errors", "exchange", "truncated")
    details = {k: v for k, v in call.details.items() if k not in shown_apart}
    return render(
        request,
        "sessions/call.html",
        {
            "call": call,
            "arguments": _json(call.arguments),
            "result": call.result,
            "blocks": _blocks(call.result),
            "structured": _json(call.result.get("structuredContent")) if call.result else "",
            "truncated": call.details.get("truncated"),
            "progress": call.details.get("progress", []),
            "field_errors": call.details.get("errors", []),
            "stderr_tail": call.details.get("stderr_tail", ""),
            "other_details": _json(details) if details else "",
            "exchange": [{**m, "json": _json(m["message"])} for m in call.exchange()],
        },
    )


def _json(value: Any) -> str:
    # Characters as they are (✅, not \u2705): the page is UTF-8 and the template escapes HTML.
    return json.dumps(value, indent=2, ensure_ascii=False)


# Images the page shows as images; others (SVG among them, which can carry script) as their JSON.
SHOWN_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


def _blocks(result: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The result's content blocks as the call's page shows them: text as text, images as images."""
    blocks = []
    for block in (result or {}).get("content") or []:
        kind = block.get("type")
        if kind == "text":
            blocks.append({"kind": "text", "text": block.get("text", "")})
        elif kind == "image" and block.get("mimeType") in SHOWN_IMAGE_TYPES and isinstance(block.get("data"), str):
            blocks.append({"kind": "image", "src": f"data:{block['mimeType']};base64,{block['data']}"})
        else:
            blocks.append({"kind": "json", "json": _json(block)})
    return blocks


@login_required
def call_full_output(request: HttpRequest, call_id: str) -> HttpResponse:
    """The whole output of a call whose shown result was truncated; only its owner may have it."""
    call = get_object_or_404(ToolCall.objects.only("id", "user", "full_output"), pk=call_id, user=request.user)
    if call.full_output is None:
        raise Http404("This call's output was not truncated.")
    response = HttpResponse(bytes(call.full_output), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="call-{call.pk}-output.json"'
    return response


@login_required
def call_export(request: HttpRequest, call_id: str) -> HttpResponse:
    call = get_object_or_404(ToolCall.objects.select_related("access_token"), pk=call_id, user=request.user)
    return _download(call.as_record(), f"mcp-call-{call.pk}.json")


def _download(body: Any, filename: str) -> HttpResponse:
    response = JsonResponse(body, safe=False, json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


# -- the audit log ---------------------------------------------------------------------------


def _visible_events(user: Any) -> QuerySet[AuditEvent]:
    """Team admins and auditors see their teams' rows; everyone sees their own."""
    teams = teams_where(user, TeamAction.READ_TEAM_AUDIT)
    return AuditEvent.objects.filter(Q(user=user) | Q(team__in=teams)).select_related("team")


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
    reader = request.user.get_username()
    if export == "csv":
        lines = audit.csv_lines(events.iterator(chunk_size=500), reader)
        response = StreamingHttpResponse(lines, content_type="text/csv")
        response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
        return response
    if export == "json":
        response = JsonResponse({"events": [audit.as_row(e, reader) for e in events.iterator(chunk_size=500)]})
        response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.json"'
        return response
    is_admin = teams_where(request.user, TeamAction.READ_TEAM_AUDIT).exists()
    query = urlencode({name: value for name, value in params.items() if value})
    shown = mark_former_members(list(events[:AUDIT_PAGE_ROWS]), lambda e: e.team_id)
    return render(
        request,
        "sessions/audit.html",
        {
            "events": [audit.shown_to(event, reader) for event in shown],
            "limit": AUDIT_PAGE_ROWS,
            "params": params,
            "query": query,
            "is_admin": is_admin,
            "kinds": AuditKind.choices,
            "outcomes": [
                *CallStatus.values,
                "rule_saved",
                "rule_pinned",
                "rule_deleted",
                "defaults_saved",
                "hook_saved",
                "hook_deleted",
                "invited",
                "joined",
                "role_changed",
                "removed",
                "left",
                "accept",
                "decline",
                "cancel",
            ],
        },
    )
