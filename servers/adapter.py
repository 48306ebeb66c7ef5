"""The portal's rules for accounts, where allauth asks: who may sign up, which team they join, and
how failed logins are counted."""

from __future__ import annotations

from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.utils import filter_users_by_email, filter_users_by_username
from django.conf import settings
from django.contrib.sites.shortcuts import get_current_site
from django.http import HttpRequest

from .actions import do_give_superuser_a_team, do_join_signup_team


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


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return settings.PORTAL_SIGNUP_OPEN

    def save_user(self, request: HttpRequest, user: Any, form: Any, commit: bool = True) -> Any:
        user = super().save_user(request, user, form, commit=commit)
        if commit:
            do_join_signup_team(user)
        return user

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
