from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from django.conf import settings
from django.http import HttpRequest

from .actions import do_ensure_membership


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return settings.PORTAL_SIGNUP_OPEN

    def login(self, request: HttpRequest, user: Any) -> None:
        # Accounts made by createsuperuser never pass through signup: give them a team here.
        do_ensure_membership(user)
        super().login(request, user)
