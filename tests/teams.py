"""The team pages as a person uses them, for tests: `TeamPages(user).invite(...)`, then `.accept(link)`."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from servers.models import Membership, Team

LINK = re.compile(r'value="(http[^"]+/teams/join/[^"]+/)"')


class TeamPages:
    """A logged-in browser on the team pages (or a logged-out one, with user None)."""

    def __init__(self, user: Any = None, client: Client | None = None):
        self.client = client or Client()
        if user is not None:
            self.client.force_login(user)

    def create(self, name: str):
        return self.client.post("/teams/", {"name": name})

    def invite(self, team: Team, email: str, role: str = "member") -> str:
        """Invite and return the link the page shows once ("" when the page refused)."""
        page = self.client.post(f"/teams/{team.pk}/invite/", {"email": email, "role": role})
        self.last = page
        found = LINK.search(page.content.decode()) if page.status_code == 200 else None
        return found.group(1) if found else ""

    def open(self, link: str):
        return self.client.get(path_of(link))

    def accept(self, link: str):
        return self.client.post(path_of(link))

    def sign_up_through(self, link: str, username: str, email: str):
        self.open(link)
        return self.client.post(
            "/accounts/signup/",
            {
                "username": username,
                "email": email,
                "password1": "a-long-passphrase-1",
                "password2": "a-long-passphrase-1",
            },
        )

    def set_role(self, membership: Membership, role: str):
        return self.client.post(f"/teams/members/{membership.pk}/role/", {"role": role}, follow=True)

    def remove(self, membership: Membership):
        return self.client.post(f"/teams/members/{membership.pk}/remove/", follow=True)

    def leave(self, team: Team):
        return self.client.post(f"/teams/{team.pk}/leave/", follow=True)


def path_of(link: str) -> str:
    return link[link.index("/teams/") :]


def membership(user: Any, team: Team | str) -> Membership | None:
    team = Team.objects.get(name=team) if isinstance(team, str) else team
    return Membership.objects.filter(user=user, team=team).first()
