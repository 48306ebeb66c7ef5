"""`python manage.py create_access_token USERNAME [--servers a,b] [--expires-days N] [--name NAME]`.

Prints only the new token, so a script can read it: `TOKEN=$(python manage.py create_access_token ci)`.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from servers.models import Server
from sessions.access_tokens import TokenError, do_create_token


class Command(BaseCommand):
    help = "Make a personal access token for the portal's MCP endpoint; prints only the token (shown this once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username", help="Whose token: it acts as them, within their teams and rules.")
        parser.add_argument("--servers", default="", help="Limit it to these servers (names, comma-separated).")
        parser.add_argument("--expires-days", type=int, default=None, help="Expire after N days (1 to 3650).")
        parser.add_argument("--name", default="", help='What it is for (default "made by manage.py").')

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"No user named {options['username']!r}.")
        servers = [self._usable_server(user, name) for name in _names(options["servers"])]
        try:
            _, text = do_create_token(user, options["name"] or "made by manage.py", servers, options["expires_days"])
        except TokenError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(text)

    def _usable_server(self, user: Any, name: str) -> Server:
        # Server names are unique within a team only: one the user may use in two teams is ambiguous.
        found = list(Server.objects.usable_by(user).filter(name=name)[:2])
        if not found:
            raise CommandError(f"{user.get_username()} may use no server named {name!r}.")
        if len(found) > 1:
            raise CommandError(f"{user.get_username()} may use several servers named {name!r}; limit it on the page.")
        return found[0]


def _names(text: str) -> list[str]:
    return list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
