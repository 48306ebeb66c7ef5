"""Team pages: my teams, a team's members and invitations, accepting an invitation.

Each view finds the team among the person's own (another team's id is a 404, so ids are not for
probing) and asks servers/permissions.py's team_allows() what their role lets them do there.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from sessions.models import ToolCall

from . import team_actions as actions
from .models import Invitation, Membership, Role, Team
from .permissions import team_allows, team_role
from .roles import TeamAction
from .team_forms import InviteForm, RoleForm, TeamNameForm

INVITATION_SESSION_KEY = actions.INVITATION_SESSION_KEY


def _my_team(request: HttpRequest, team_id: int, action: TeamAction) -> Team:
    team = get_object_or_404(Team.objects.filter(memberships__user=request.user), pk=team_id)
    if not team_allows(request.user, team.pk, action):
        raise PermissionDenied("Only the team's admins can do that.")
    return team


def _membership(request: HttpRequest, membership_id: int) -> Membership:
    # Only memberships of the person's own teams; the action checks the role.
    teams = Team.objects.filter(memberships__user=request.user)
    return get_object_or_404(Membership.objects.select_related("team", "user").filter(team__in=teams), pk=membership_id)


def _refused(request: HttpRequest, exc: actions.TeamError, team_id: int) -> HttpResponse:
    messages.error(request, str(exc))
    return redirect("team_detail", team_id=team_id)


@login_required
def team_list(request: HttpRequest) -> HttpResponse:
    form = TeamNameForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            team = actions.do_create_team(request.user, form.cleaned_data["name"])
        except actions.TeamError as exc:
            form.add_error("name", str(exc))
        else:
            messages.success(request, f"Created {team.name}; you are its admin. Invite your colleagues below.")
            return redirect("team_detail", team_id=team.pk)
    memberships = Membership.objects.filter(user=request.user).select_related("team").order_by("team__name")
    return render(request, "teams/list.html", {"memberships": memberships, "form": form})


def _detail_context(request: HttpRequest, team: Team, **extra: Any) -> dict[str, Any]:
    last_call = (
        ToolCall.objects.filter(user=OuterRef("user"), server__team=team).order_by("-created_at").values("created_at")
    )
    members = (
        team.memberships.select_related("user").annotate(last_call=Subquery(last_call[:1])).order_by("user__username")
    )
    is_admin = team_allows(request.user, team.pk, TeamAction.MANAGE_MEMBERS)
    invitations = team.invitations.select_related("invited_by")[:50] if is_admin else []
    return {
        "team": team,
        "role": team_role(request.user, team.pk),
        "members": members,
        "invitations": [i for i in invitations if i.state == "pending"],
        "is_admin": is_admin,
        "roles": Role.choices,
        "invite_form": InviteForm(),
        "rename_form": TeamNameForm(initial={"name": team.name}),
        **extra,
    }


@login_required
def team_detail(request: HttpRequest, team_id: int) -> HttpResponse:
    team = _my_team(request, team_id, TeamAction.SEE_MEMBERS)
    return render(request, "teams/detail.html", _detail_context(request, team))


@login_required
@require_POST
def team_invite(request: HttpRequest, team_id: int) -> HttpResponse:
    team = _my_team(request, team_id, TeamAction.MANAGE_MEMBERS)
    form = InviteForm(request.POST)
    link = ""
    if form.is_valid():
        try:
            invitation, token = actions.do_invite_member(
                request.user,
                team,
                form.cleaned_data["email"],
                form.cleaned_data["role"],
                lambda token: request.build_absolute_uri(reverse("invitation_accept", args=[token])),
            )
        except actions.TeamError as exc:
            form.add_error("email", str(exc))
        else:
            # Rendered, not redirected: the link is shown this once and kept nowhere (only its hash is).
            link = request.build_absolute_uri(reverse("invitation_accept", args=[token]))
            messages.success(request, f"Invited {invitation.email}; the link was mailed to them.")
            form = InviteForm()
    return render(request, "teams/detail.html", _detail_context(request, team, invite_form=form, new_link=link))


@login_required
@require_POST
def team_rename(request: HttpRequest, team_id: int) -> HttpResponse:
    team = _my_team(request, team_id, TeamAction.MANAGE_MEMBERS)
    form = TeamNameForm(request.POST)
    if form.is_valid():
        try:
            actions.do_rename_team(request.user, team, form.cleaned_data["name"])
        except actions.TeamError as exc:
            return _refused(request, exc, team.pk)
        messages.success(request, f"Renamed the team to {team.name}.")
    return redirect("team_detail", team_id=team.pk)


@login_required
def team_delete(request: HttpRequest, team_id: int) -> HttpResponse:
    team = _my_team(request, team_id, TeamAction.MANAGE_MEMBERS)
    losses = actions.deletion_losses(team)
    if request.method == "POST":
        name = team.name
        actions.do_delete_team(request.user, team)
        messages.success(request, f"Deleted {name}. Its call records and audit rows stay.")
        return redirect("team_list")
    return render(request, "teams/delete.html", {"team": team, "losses": losses})


@login_required
@require_POST
def team_leave(request: HttpRequest, team_id: int) -> HttpResponse:
    team = _my_team(request, team_id, TeamAction.SEE_MEMBERS)
    try:
        actions.do_leave_team(request.user, team)
    except actions.TeamError as exc:
        return _refused(request, exc, team.pk)
    messages.success(request, f"You left {team.name}.")
    return redirect("team_list")


@login_required
@require_POST
def invitation_revoke(request: HttpRequest, invitation_id: int) -> HttpResponse:
    teams = Team.objects.filter(memberships__user=request.user)
    invitation = get_object_or_404(Invitation.objects.select_related("team").filter(team__in=teams), pk=invitation_id)
    try:
        actions.do_revoke_invitation(request.user, invitation)
    except actions.TeamError as exc:
        return _refused(request, exc, invitation.team_id)
    messages.success(request, f"Revoked the invitation of {invitation.email}.")
    return redirect("team_detail", team_id=invitation.team_id)


@login_required
@require_POST
def member_role(request: HttpRequest, membership_id: int) -> HttpResponse:
    membership = _membership(request, membership_id)
    form = RoleForm(request.POST)
    if not form.is_valid():
        return _refused(request, actions.TeamError("Choose a role."), membership.team_id)
    try:
        actions.do_change_role(request.user, membership, form.cleaned_data["role"])
    except actions.TeamError as exc:
        return _refused(request, exc, membership.team_id)
    messages.success(request, f"{membership.user.get_username()} is now {form.cleaned_data['role']}.")
    return redirect("team_detail", team_id=membership.team_id)


@login_required
@require_POST
def member_remove(request: HttpRequest, membership_id: int) -> HttpResponse:
    membership = _membership(request, membership_id)
    try:
        actions.do_remove_member(request.user, membership)
    except actions.TeamError as exc:
        return _refused(request, exc, membership.team_id)
    messages.success(request, f"Removed {membership.user.get_username()} from {membership.team.name}.")
    if membership.user_id == request.user.pk:
        return redirect("team_list")
    return redirect("team_detail", team_id=membership.team_id)


def invitation_accept(request: HttpRequest, token: str) -> HttpResponse:
    """The link of an invitation. Logged out: sign up (even when open signup is closed) or log in,
    then come back; logged in: accept it, as the account it was sent to."""
    invitation = actions.pending_invitation(token)
    if request.method == "POST":
        if not request.user.is_authenticated:
            raise Http404("Log in first.")
        try:
            membership = actions.do_accept_invitation(request.user, token)
        except actions.TeamError as exc:
            return render(request, "teams/invitation.html", {"invitation": None, "refused": str(exc)}, status=403)
        request.session.pop(INVITATION_SESSION_KEY, None)
        messages.success(request, f"You joined {membership.team.name} as {membership.role}.")
        return redirect("team_detail", team_id=membership.team_id)
    if invitation is None:
        refused = "This invitation link is not valid, was used already, was revoked or expired; ask for a new one."
        return render(request, "teams/invitation.html", {"invitation": None, "refused": refused}, status=410)
    if not request.user.is_authenticated:
        # Kept for the signup form (servers/adapter.py opens signup for it, for this address only).
        request.session[INVITATION_SESSION_KEY] = token
    here = reverse("invitation_accept", args=[token])
    return render(request, "teams/invitation.html", {"invitation": invitation, "here": here})
