"""Registry pages: team admins add, edit, enable, disable and delete; members look."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from sessions.mcp.naming import annotate_tools
from sessions.models import ConnectionStatus

from . import actions
from .forms import ServerForm
from .models import Role, Server, Team


def _visible_server(request: HttpRequest, server_id: int) -> Server:
    return get_object_or_404(Server.objects.visible_to(request.user).select_related("team").distinct(), pk=server_id)


def _administered_server(request: HttpRequest, server_id: int) -> Server:
    server = _visible_server(request, server_id)
    if not server.is_admin(request.user):
        raise PermissionDenied("Only the team's admins can change its servers.")
    return server


def _admin_teams(request: HttpRequest):
    return Team.objects.filter(memberships__user=request.user, memberships__role=Role.ADMIN).order_by("name")


def _attach_connection_status(user, servers) -> None:
    """Give each server `.connection`: the status of the session this user's calls would use."""
    owners = {server.pk: server.connection_owner(user.pk) for server in servers}
    rows = ConnectionStatus.objects.filter(server_id__in=owners, owner__in=set(owners.values()))
    found = {(row.server_id, row.owner): row for row in rows}
    for server in servers:
        server.connection = found.get((server.pk, owners[server.pk]))


@login_required
def server_list(request: HttpRequest) -> HttpResponse:
    servers = list(Server.objects.visible_to(request.user).select_related("team").distinct())
    _attach_connection_status(request.user, servers)
    admin_team_ids = set(_admin_teams(request).values_list("id", flat=True))
    return render(
        request,
        "servers/list.html",
        {"servers": servers, "admin_team_ids": admin_team_ids, "can_add": bool(admin_team_ids)},
    )


@login_required
def server_add(request: HttpRequest) -> HttpResponse:
    teams = _admin_teams(request)
    if not teams.exists():
        raise PermissionDenied("Only team admins can register servers.")
    form = ServerForm(
        request.POST or None,
        teams=teams,
        initial=None if request.POST else {"transport": "stdio", "enabled": True, "request_timeout": 60},
    )
    if request.method == "POST" and form.is_valid():
        server = actions.do_create_server(form.cleaned_data["team"], request.user, form.cleaned_data)
        messages.success(request, f"Registered {server.name}. Test the connection to see its tools.")
        return redirect("server_detail", server_id=server.pk)
    return render(request, "servers/form.html", {"form": form, "adding": True})


@login_required
def server_edit(request: HttpRequest, server_id: int) -> HttpResponse:
    server = _administered_server(request, server_id)
    form = ServerForm(request.POST or None, teams=Team.objects.filter(pk=server.team_id), instance=server)
    if request.method == "POST" and form.is_valid():
        actions.do_update_server(server, form.cleaned_data)
        messages.success(request, f"Saved {server.name}.")
        return redirect("server_detail", server_id=server.pk)
    return render(request, "servers/form.html", {"form": form, "server": server, "adding": False})


@login_required
def server_detail(request: HttpRequest, server_id: int) -> HttpResponse:
    server = _visible_server(request, server_id)
    _attach_connection_status(request.user, [server])
    tools = annotate_tools(server.name, server.tools)
    return render(
        request,
        "servers/detail.html",
        {"server": server, "tools": tools, "is_admin": server.is_admin(request.user)},
    )


@login_required
@require_POST
def server_toggle(request: HttpRequest, server_id: int) -> HttpResponse:
    server = _administered_server(request, server_id)
    actions.do_set_server_enabled(server, not server.enabled)
    messages.success(request, f"{server.name} is now {'disabled' if server.enabled else 'enabled'}.")
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "server_list"
    return redirect(target)


@login_required
def server_delete(request: HttpRequest, server_id: int) -> HttpResponse:
    server = _administered_server(request, server_id)
    if request.method == "POST":
        actions.do_delete_server(server)
        messages.success(request, f"Deleted {server.name}. Its call history is kept.")
        return redirect("server_list")
    return render(request, "servers/delete.html", {"server": server})
