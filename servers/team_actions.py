"""Writes about teams and who is in them: create, rename, delete, invite, accept, change a role, remove, leave.

Every membership change writes an audit row (kind "membership") in its transaction; the role checks
are servers/roles.py's, asked here so that no view can skip them.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from sessions import audit, events
from sessions.actions import do_withdraw_member_requests
from sessions.connection_needs import credential_changed_message, owner_of
from sessions.mcp.owner import EVERYONE
from sessions.models import AuditKind

from .credentials.models import Credential
from .models import Invitation, Membership, Role, Server, Team
from .permissions import team_role
from .roles import TeamAction, may, membership_change_error

INVITATION_DAYS = 7
# Where the link of an invitation waits while its invitee signs up or logs in (servers/adapter.py).
INVITATION_SESSION_KEY = "portal_invitation"


class TeamError(Exception):
    """A change the portal refuses; the text is for the person who asked."""


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _record(by: Any, team: Team, outcome: str, about: str, reason: str = "") -> None:
    # `tool` is the audit log's free "what" column; for membership rows it names the person concerned.
    audit.record(AuditKind.MEMBERSHIP, by, team=team, outcome=outcome, tool=about[:210], reason=reason)


def _require(by: Any, team: Team, action: TeamAction) -> str:
    role = team_role(by, team.pk)
    if not may(role, action):
        raise TeamError("Only the team's admins can do that.")
    return role or ""


# -- teams -------------------------------------------------------------------------------------


@transaction.atomic
def do_create_team(by: Any, name: str) -> Team:
    """A new team with its creator as its admin."""
    name = name.strip()
    if not name:
        raise TeamError("Give the team a name.")
    try:
        with transaction.atomic():
            team = Team.objects.create(name=name)
    except IntegrityError:
        raise TeamError(f"A team named {name} exists already; choose another name.") from None
    Membership.objects.create(team=team, user=by, role=Role.ADMIN)
    _record(by, team, "team_created", by.get_username(), f"Created the team {name}.")
    return team


@transaction.atomic
def do_rename_team(by: Any, team: Team, name: str) -> Team:
    _require(by, team, TeamAction.MANAGE_MEMBERS)
    name = name.strip()
    if not name:
        raise TeamError("Give the team a name.")
    if Team.objects.filter(name=name).exclude(pk=team.pk).exists():
        raise TeamError(f"A team named {name} exists already; choose another name.")
    old, team.name = team.name, name
    team.save(update_fields=["name"])
    _record(by, team, "team_renamed", by.get_username(), f"Renamed {old} to {name}.")
    return team


def deletion_losses(team: Team) -> dict[str, Any]:
    """What deleting the team takes with it, for the confirmation page."""
    return {
        "servers": list(team.servers.values_list("name", flat=True)),
        "members": team.memberships.count(),
        "credentials": Credential.objects.filter(server__team=team).count(),
    }


@transaction.atomic
def do_delete_team(by: Any, team: Team) -> None:
    """Delete the team, its servers, their credentials and its memberships. Call records and audit
    rows stay (they copy names), so history outlives the team."""
    _require(by, team, TeamAction.MANAGE_MEMBERS)
    server_ids = list(team.servers.values_list("pk", flat=True))
    _record(by, team, "team_deleted", by.get_username(), f"Deleted the team {team.name}.")
    team.delete()
    # Every pooled connection to those servers closes: the servers are gone.
    transaction.on_commit(lambda: _close_connections(server_ids, EVERYONE))


# -- invitations -------------------------------------------------------------------------------


@transaction.atomic
def do_invite_member(by: Any, team: Team, email: str, role: str, accept_url: Any) -> tuple[Invitation, str]:
    """Invite `email` into the team with `role`: returns the invitation and its link's token, which is
    never stored (only its hash) and mailed to the address once the invitation is committed.

    `accept_url(token)` builds the absolute link for the mail."""
    _require(by, team, TeamAction.MANAGE_MEMBERS)
    email = email.strip()
    if role not in Role.values:
        raise TeamError("Unknown role.")
    if Membership.objects.filter(team=team, user__email__iexact=email).exists():
        raise TeamError(f"{email} is in the team already.")
    token = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        team=team,
        email=email,
        role=role,
        token_hash=hash_token(token),
        invited_by=by,
        expires_at=timezone.now() + timedelta(days=INVITATION_DAYS),
    )
    _record(by, team, "invited", email, f"Invited {email} as {role}.")
    link = accept_url(token)
    inviter = by.get_full_name() or by.get_username()
    transaction.on_commit(
        lambda: send_mail(
            f"{inviter} invites you to {team.name} on the MCP Portal",
            f"{inviter} invited you to the team {team.name} as {role}.\n\n"
            f"Accept within {INVITATION_DAYS} days (the link works once):\n{link}\n",
            settings.DEFAULT_FROM_EMAIL,
            [email],
        )
    )
    return invitation, token


@transaction.atomic
def do_revoke_invitation(by: Any, invitation: Invitation) -> None:
    _require(by, invitation.team, TeamAction.MANAGE_MEMBERS)
    revoked = Invitation.objects.filter(pk=invitation.pk, accepted_at__isnull=True, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    if revoked:
        _record(
            by,
            invitation.team,
            "invitation_revoked",
            invitation.email,
            f"Revoked the invitation of {invitation.email}.",
        )


def pending_invitation(token: str) -> Invitation | None:
    """The invitation a link's token opens, if it is still pending (not used, revoked or expired)."""
    if not token or len(token) > 100:
        return None
    invitation = Invitation.objects.select_related("team").filter(token_hash=hash_token(token)).first()
    if invitation is None or invitation.state != "pending":
        return None
    return invitation


@transaction.atomic
def do_accept_invitation(user: Any, token: str) -> Membership:
    """Join the team the link invites to, once, as the account the invitation was for.

    The link was mailed to an address, so only an account with that address may use it: a member who
    saw someone else's link cannot join (or join someone else) with it.
    """
    invitation = (
        Invitation.objects.select_for_update().select_related("team").filter(token_hash=hash_token(token or "")).first()
    )
    if invitation is None or invitation.state == "revoked":
        raise TeamError("This invitation link is not valid; ask the team's admin for a new one.")
    if invitation.state == "accepted":
        raise TeamError("This invitation link was used already; ask the team's admin for a new one.")
    if invitation.state == "expired":
        raise TeamError(f"This invitation expired (links last {INVITATION_DAYS} days); ask for a new one.")
    if (user.email or "").casefold() != invitation.email.casefold():
        raise TeamError(f"This invitation is for {invitation.email}; log in as that account to accept it.")
    invitation.accepted_at, invitation.accepted_by = timezone.now(), user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    membership, created = Membership.objects.get_or_create(
        team=invitation.team, user=user, defaults={"role": invitation.role}
    )
    if created:
        _record(user, invitation.team, "joined", user.get_username(), f"Joined as {invitation.role} by invitation.")
    return membership


# -- roles and leaving -------------------------------------------------------------------------


def _admin_count(team: Team) -> int:
    # Locked rows: two admins demoting each other at once cannot leave the team with none.
    return len(list(Membership.objects.select_for_update().filter(team=team, role=Role.ADMIN).values_list("pk")))


def _check(by: Any, membership: Membership, new_role: str | None) -> None:
    error = membership_change_error(
        team_role(by, membership.team_id),
        membership.user_id == by.pk,
        membership.role,
        new_role,
        _admin_count(membership.team),
    )
    if error:
        raise TeamError(error)


@transaction.atomic
def do_change_role(by: Any, membership: Membership, role: str) -> Membership:
    """Change a member's role. It counts at once: every page and socket message reads the role afresh."""
    membership = Membership.objects.select_for_update().select_related("team", "user").get(pk=membership.pk)
    _check(by, membership, role)
    if membership.role == role:
        return membership
    old, membership.role = membership.role, role
    membership.save(update_fields=["role"])
    name = membership.user.get_username()
    _record(by, membership.team, "role_changed", name, f"{name}: {old} → {role}.")
    if not may(role, TeamAction.USE_SERVERS):
        _end_use_of_servers(membership)
    return membership


@transaction.atomic
def do_remove_member(by: Any, membership: Membership) -> None:
    membership = Membership.objects.select_for_update().select_related("team", "user").get(pk=membership.pk)
    _check(by, membership, None)
    leaving = membership.user_id == by.pk
    name = membership.user.get_username()
    membership.delete()
    if leaving:
        _record(by, membership.team, "left", name, f"{name} left the team.")
    else:
        _record(by, membership.team, "removed", name, f"Removed {name} (was {membership.role}).")
    _end_use_of_servers(membership)


def do_leave_team(user: Any, team: Team) -> None:
    membership = Membership.objects.filter(team=team, user=user).first()
    if membership is None:
        raise TeamError("You are not in this team.")
    do_remove_member(user, membership)


def _end_use_of_servers(membership: Membership) -> None:
    """Someone can no longer use the team's servers (removed, left, made auditor): their own secrets for
    those servers go, their waiting approvals and forms are withdrawn, and every pooled connection
    that used their credentials closes. Their call records and audit rows stay."""
    user_id, team = membership.user_id, membership.team
    server_ids = list(Server.objects.filter(team=team).values_list("pk", flat=True))
    Credential.objects.filter(Q(server_id__in=server_ids), user_id=user_id).delete()
    do_withdraw_member_requests(
        user_id, server_ids, f"You are no longer a member of {team.name} who may call its servers."
    )
    transaction.on_commit(lambda: _close_connections(server_ids, owner_of(user_id)))


def _close_connections(server_ids: list[int], owner: str) -> None:
    """Through the workers' one door for credential changes (sessions/credentials.py): each worker
    closes the connections whose owner may no longer use them."""
    for server_id in server_ids:
        events.tell_workers(credential_changed_message(server_id, owner))
