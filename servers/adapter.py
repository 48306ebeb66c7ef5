"""The portal's rules for accounts, where allauth asks: who may sign up, which team they join, and
how failed logins are counted.

An invitation link (servers/team_views.py) opens signup even when open signup is closed, for the
invited address only, and the new account joins the team it invites to."""

from __future__ import annotations

from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.utils import filter_users_by_email, filter_users_by_username
from django import forms
from django.conf import settings
from django.contrib.sites.shortcuts import get_current_site
from django.http import HttpRequest

from .actions import do_give_superuser_a_team, do_join_signup_team
from .models import Invitation
from .team_actions import INVITATION_SESSION_KEY, TeamError, do_accept_invitation, pending_invitation


def account_named(credentials: dict[str, Any]) -> Any:
    """The account a login string names, by its email or by its username (allauth tries both)."""
    email, username = credentials.get("email"), credentials.get("username")
    if email:
        found = filter_users_by_email(email, prefer_verified=True)
        if found:
            return found[0]
    if username:
        return filter_users_by_username(username).first()
    return None


def invitation_in(request: HttpRequest | None) -> tuple[str, Invitation | None]:
    """The invitation link this browser opened before signing up (its token and invitation), if pending."""
    token = request.session.get(INVITATION_SESSION_KEY, "") if request is not None else ""
    if not isinstance(token, str) or not token:
        return "", None
    return token, pending_invitation(token)


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return settings.PORTAL_SIGNUP_OPEN or invitation_in(request)[1] is not None

    def clean_email(self, email: str) -> str:
        email = super().clean_email(email)
        # Only the signup page is limited: a password reset cleans its address here too, and a
        # logged-in person adding an address to their account is not signing up.
        match = getattr(self.request, "resolver_match", None) if self.request is not None else None
        signing_up = match is not None and match.url_name == "account_signup"
        if signing_up and not settings.PORTAL_SIGNUP_OPEN:
            # Signup is open only because of an invitation: for the address it was sent to, no other.
            invitation = invitation_in(self.request)[1]
            if invitation is None or invitation.email.casefold() != email.casefold():
                shown = invitation.email if invitation else "the invited address"
                raise forms.ValidationError(f"Sign up with the address the invitation was sent to ({shown}).")
        return email

    def save_user(self, request: HttpRequest, user: Any, form: Any, commit: bool = True) -> Any:
        user = super().save_user(request, user, form, commit=commit)
        if commit:
            do_join_signup_team(user)
            self._accept_invitation(request, user)
        return user

    def _accept_invitation(self, request: HttpRequest, user: Any) -> None:
        token, invitation = invitation_in(request)
        if invitation is None:
            return
        try:
            do_accept_invitation(user, token)
        except TeamError:
            return  # another address: the invitation stays for its own invitee
        request.session.pop(INVITATION_SESSION_KEY, None)

    def login(self, request: HttpRequest, user: Any) -> None:
        # Accounts made by createsuperuser never pass through signup: give them a team here.
        do_give_superuser_a_team(user)
        super().login(request, user)

    def _get_login_attempts_cache_key(self, request: HttpRequest, **credentials: Any) -> str:
        # allauth counts failed logins per login string, so an account locked by its username could be
        # tried again by its email. Counted per account instead, whichever string names it; a string
        # that names no account keeps its own count (it is locked out just the same).
        user = account_named(credentials)
        if user is None:
            return super()._get_login_attempts_cache_key(request, **credentials)
        return f"{get_current_site(request).domain}:account:{user.pk}"
