"""Registry pages: team admins add, edit, enable, disable and delete; members look."""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from portal.origin import redirect_uri_mismatch
from sessions.mcp.naming import annotate_tools, endpoint_names, names_fit, normalize_name
from sessions.models import ConnectionStatus

from . import actions, mcp_json
from .forms import ElicitationHookForm, ImportForm, RuleForm, ServerForm, TeamDefaultsForm
from .models import ElicitationHook, Membership, PermissionRule, Server, Team, TeamPolicy
from .outbound import sandbox_enabled
from .permissions import describe_tools, team_allows, teams_where
from .roles import TeamAction

DEFAULT_FIELDS = ("read_only", "destructive", "other")


def team_required(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """For pages about a team's servers: a logged-in person in no team (a new signup) is told how to
    join one, rather than shown empty pages."""

    @login_required
    @wraps(view)
    def checked(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not Membership.objects.filter(user=request.user).exists():
            return render(request, "no_team.html")
        return view(request, *args, **kwargs)

    return checked


def _visible_server(request: HttpRequest, server_id: int) -> Server:
    return get_object_or_404(Server.objects.visible_to(request.user).select_related("team").distinct(), pk=server_id)


def _administered_server(request: HttpRequest, server_id: int) -> Server:
    server = _visible_server(request, server_id)
    if not server.is_admin(request.user):
        raise PermissionDenied("Only the team's admins can change its servers.")
    return server


def _admin_teams(request: HttpRequest):
    return teams_where(request.user, TeamAction.MANAGE_SERVERS).order_by("name")


def _attach_connection_status(user, servers) -> None:
    """Give each server `.connection`: the status of the session this user's calls would use."""
    owners = {server.pk: server.connection_owner(user.pk) for server in servers}
    rows = ConnectionStatus.objects.filter(server_id__in=owners, owner__in=set(owners.values()))
    found = {(row.server_id, row.owner): row for row in rows}
    for server in servers:
        server.connection = found.get((server.pk, owners[server.pk]))


@team_required
def server_list(request: HttpRequest) -> HttpResponse:
    servers = list(Server.objects.visible_to(request.user).select_related("team").distinct())
    _attach_connection_status(request.user, servers)
    admin_team_ids = set(_admin_teams(request).values_list("id", flat=True))
    return render(
        request,
        "servers/list.html",
        {
            "servers": servers,
            "admin_team_ids": admin_team_ids,
            "can_add": bool(admin_team_ids),
            # Admins are told when stdio servers run unsandboxed, as the portal's own user.
            "sandbox_off": bool(admin_team_ids) and not sandbox_enabled(),
            "address_notice": redirect_uri_mismatch(request) if admin_team_ids else None,
        },
    )


@login_required
def server_add(request: HttpRequest) -> HttpResponse:
    teams = _admin_teams(request)
    if not teams.exists():
        raise PermissionDenied("Only team admins can register servers.")
    form = ServerForm(
        request.POST or None,
        teams=teams,
        initial=None
        if request.POST
        else {"transport": "stdio", "enabled": True, "network": True, "request_timeout": 60},
        operator=request.user.is_superuser,
    )
    if request.method == "POST" and form.is_valid():
        server = actions.do_create_server(form.cleaned_data["team"], request.user, form.cleaned_data)
        messages.success(request, f"Registered {server.name}. Test the connection to see its tools.")
        return redirect("server_detail", server_id=server.pk)
    return render(request, "servers/form.html", {"form": form, "adding": True})


@login_required
def server_edit(request: HttpRequest, server_id: int) -> HttpResponse:
    server = _administered_server(request, server_id)
    form = ServerForm(
        request.POST or None,
        teams=Team.objects.filter(pk=server.team_id),
        instance=server,
        operator=request.user.is_superuser,
    )
    if request.method == "POST" and form.is_valid():
        actions.do_update_server(server, form.cleaned_data)
        messages.success(request, f"Saved {server.name}.")
        return redirect("server_detail", server_id=server.pk)
    return render(request, "servers/form.html", {"form": form, "server": server, "adding": False})


@login_required
def server_detail(request: HttpRequest, server_id: int) -> HttpResponse:
    server = _visible_server(request, server_id)
    _attach_connection_status(request.user, [server])
    described = describe_tools(server, request.user.pk)
    tools = [{**tool, **described[tool.get("name", "")]} for tool in annotate_tools(server.name, server.tools)]
    return render(
        request,
        "servers/detail.html",
        {
            "server": server,
            "tools": tools,
            "is_admin": server.is_admin(request.user),
            "cut": _cut_names(server),
            "endpoint_path": normalize_name(server.name),
        },
    )


def _cut_names(server: Server) -> list[dict[str, str]]:
    """The tools agents see under another name on the portal's `/mcp/` (too long with a client's
    prefix), each with that name, so a person reading an agent's tool list can find them."""
    names = [str(tool.get("name", "")) for tool in server.tools]
    shown = endpoint_names(normalize_name(server.name), names)
    return [{"tool": tool, "endpoint_name": shown[tool]} for tool in names_fit(server.name, names)]


@login_required
@require_POST
def tool_pin(request: HttpRequest, server_id: int) -> HttpResponse:
    """Always allow one tool as listed now: for the team (admins) or for yourself."""
    server = _visible_server(request, server_id)
    tool = server.tool(request.POST.get("tool", ""))
    if tool is None:
        messages.error(request, "That tool is not in the server's tool list; refresh the list and try again.")
        return redirect("server_detail", server_id=server.pk)
    for_team = request.POST.get("scope") == "team"
    if for_team and not server.is_admin(request.user):
        raise PermissionDenied("Only the team's admins can allow tools for the team.")
    actions.do_pin_rule(server, tool, None if for_team else request.user, request.user)
    who = "the team" if for_team else "you"
    messages.success(request, f"{server.prefix}{tool['name']} is allowed for {who}, as it is defined now.")
    return redirect("server_detail", server_id=server.pk)


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


# -- mcpServers import and export ---------------------------------------------------------------


@login_required
def server_import(request: HttpRequest) -> HttpResponse:
    """Paste or upload → preview (nothing written) → create all new servers, or none."""
    teams = _admin_teams(request)
    if not teams.exists():
        raise PermissionDenied("Only team admins can import servers.")
    form = ImportForm(request.POST or None, request.FILES or None, teams=teams)
    if request.method != "POST" or not form.is_valid():
        return render(request, "servers/import.html", {"form": form})
    team, text = form.cleaned_data["team"], form.cleaned_data["config"]
    if "create" in request.POST:
        as_secrets = request.POST.get("as_secrets") == "on"
        plan, created = actions.do_import_servers(team, request.user, text, as_secrets=as_secrets)
        if plan.ok:
            if created:
                names = ", ".join(server.name for server in created)
                messages.success(request, f"Imported {len(created)} server(s) into {team.name}: {names}.")
            else:
                messages.info(request, "Nothing new to import: every server was a duplicate or not supported yet.")
            return redirect("server_list")
    else:
        plan = actions.plan_import(team, text, operator=request.user.is_superuser)
    return render(request, "servers/import_preview.html", {"form": form, "plan": plan, "team": team, "config": text})


@login_required
def server_export(request: HttpRequest) -> HttpResponse:
    """A team's servers as mcpServers JSON, secrets held back; `?download=1` for the file."""
    teams = teams_where(request.user, TeamAction.SEE_SERVERS).order_by("name")
    wanted = request.GET.get("team", "")
    team = teams.filter(pk=wanted).first() if wanted.isdigit() else teams.first()
    if team is None:
        raise PermissionDenied("You belong to no team with that id.")
    shape = "servers" if request.GET.get("format") == "vscode" else "mcpServers"
    config, notes = mcp_json.export(Server.objects.filter(team=team), shape)
    if request.GET.get("download"):
        response = JsonResponse(config, json_dumps_params={"indent": 2})
        filename = "mcp.json" if shape == "servers" else f"mcp-servers-{mcp_json.normalize_name(team.name)}.json"
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
        return response
    return render(
        request,
        "servers/export.html",
        {"teams": teams, "team": team, "shape": shape, "pretty": json.dumps(config, indent=2), "notes": notes},
    )


# -- permission rules ------------------------------------------------------------------------


def _member_teams(request: HttpRequest):
    # Every role reads its teams' policy; changing it is MANAGE_POLICY (team_policy below).
    return teams_where(request.user, TeamAction.SEE_SERVERS).order_by("name")


@login_required
def my_rules(request: HttpRequest) -> HttpResponse:
    """A person's own rules: they can tighten what their teams allow, never loosen a team deny or ask."""
    teams = _member_teams(request)
    form = RuleForm(request.POST or None, teams=teams)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        actions.do_add_rule(data["team"], request.user, data["pattern"], data["effect"], request.user)
        messages.success(request, f"Saved your rule {data['pattern']} ({data['effect']}).")
        return redirect("my_rules")
    rules = PermissionRule.objects.filter(user=request.user).select_related("team").order_by("team__name", "pattern")
    return render(request, "servers/my_rules.html", {"form": form, "rules": rules, "teams": teams})


@login_required
def team_policy(request: HttpRequest, team_id: int) -> HttpResponse:
    """A team's rules and defaults: every member may read them, admins change them."""
    team = get_object_or_404(_member_teams(request), pk=team_id)
    is_admin = team_allows(request.user, team.pk, TeamAction.MANAGE_POLICY)
    policy = TeamPolicy.objects.filter(team=team).first() or TeamPolicy(team=team)
    posted = request.POST if request.method == "POST" else None
    if posted is not None and not is_admin:
        raise PermissionDenied("Only the team's admins can change its policy.")
    which = posted.get("form") if posted else None
    rule_form = RuleForm(posted if which == "rule" else None, teams=Team.objects.filter(pk=team.pk))
    defaults_form = TeamDefaultsForm(posted if which == "defaults" else None, instance=policy)
    if which == "rule" and rule_form.is_valid():
        data = rule_form.cleaned_data
        actions.do_add_rule(team, None, data["pattern"], data["effect"], request.user)
        messages.success(request, f"Saved the team rule {data['pattern']} ({data['effect']}).")
        return redirect("team_policy", team_id=team.pk)
    if which == "defaults" and defaults_form.is_valid():
        actions.do_set_team_defaults(team, request.user, **{k: defaults_form.cleaned_data[k] for k in DEFAULT_FIELDS})
        messages.success(request, "Saved the team's defaults.")
        return redirect("team_policy", team_id=team.pk)
    rules = PermissionRule.objects.filter(team=team, user__isnull=True).select_related("created_by")
    return render(
        request,
        "servers/team_policy.html",
        {"team": team, "is_admin": is_admin, "rules": rules, "rule_form": rule_form, "defaults_form": defaults_form},
    )


@login_required
@require_POST
def rule_delete(request: HttpRequest, rule_id: int) -> HttpResponse:
    rule = get_object_or_404(PermissionRule.objects.select_related("team"), pk=rule_id)
    if rule.user_id is not None:
        allowed = rule.user_id == request.user.pk
    else:
        allowed = team_allows(request.user, rule.team_id, TeamAction.MANAGE_POLICY)
    if not allowed:
        raise Http404("No such rule.")
    actions.do_delete_rule(rule, request.user)
    messages.success(request, f"Deleted the rule {rule.pattern} ({rule.effect}).")
    return redirect("team_policy", team_id=rule.team_id) if rule.user_id is None else redirect("my_rules")


# -- elicitation hooks ---------------------------------------------------------------------------


@login_required
def elicitation_hooks(request: HttpRequest, server_id: int) -> HttpResponse:
    """A server's automatic answers to elicitation forms: team admins only (they answer for everyone)."""
    server = _administered_server(request, server_id)
    form = ElicitationHookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        actions.do_add_elicitation_hook(server, request.user, form.cleaned_data)
        messages.success(request, "Saved the automatic answer.")
        return redirect("elicitation_hooks", server_id=server.pk)
    hooks = server.elicitation_hooks.select_related("created_by")
    return render(request, "servers/hooks.html", {"server": server, "form": form, "hooks": hooks})


@login_required
@require_POST
def elicitation_hook_delete(request: HttpRequest, hook_id: int) -> HttpResponse:
    hook = get_object_or_404(ElicitationHook.objects.select_related("server"), pk=hook_id)
    server = _administered_server(request, hook.server_id)
    actions.do_delete_elicitation_hook(hook, request.user)
    messages.success(request, "Deleted the automatic answer.")
    return redirect("elicitation_hooks", server_id=server.pk)
