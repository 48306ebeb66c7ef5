"""First-run set-up for `make run`: a default team, its first admin, and the demo server."""

from __future__ import annotations

import secrets
import sys

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from servers.actions import do_create_server, do_join_team
from servers.models import Role, Server, Team


class Command(BaseCommand):
    help = "Create the first admin account (printing its password once) and register the demo server."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username: str, **options) -> None:
        User = get_user_model()
        if not User.objects.exists():
            password = secrets.token_urlsafe(12)
            # The operator's account: a superuser, so the Django admin and every team are within reach.
            # Team admins are not staff; they run their teams from the Teams page.
            user = User.objects.create_superuser(username=username, email=f"{username}@localhost", password=password)
            do_join_team(user, settings.PORTAL_DEFAULT_TEAM, Role.ADMIN)
            self.stdout.write(
                "\n".join(
                    [
                        "",
                        "=" * 64,
                        "  The first account was created. It is shown this once:",
                        f"    username: {username}",
                        f"    password: {password}",
                        "  It is the operator (a superuser) and the admin of the default team; invite",
                        "  colleagues from Teams. Change the password after logging in",
                        "  (Account → Change password), or run: python manage.py changepassword admin",
                        "=" * 64,
                        "",
                    ]
                )
            )
        team, _ = Team.objects.get_or_create(name=settings.PORTAL_DEFAULT_TEAM)
        if not Server.objects.exists():
            admin = team.memberships.filter(role="admin").select_related("user").first()
            do_create_server(
                team,
                admin.user if admin else None,
                {
                    "name": "demo",
                    "description": "The demo server shipped with the portal: echo, add, progress, image, form, sleep.",
                    "transport": "stdio",
                    "command": sys.executable,
                    "args": ["-m", "sessions.mcp.demo_server"],
                    "cwd": str(settings.BASE_DIR),
                    # Registered by the operator's own command: allowed in either mode, whatever
                    # PORTAL_STDIO_COMMANDS lets team admins start.
                    "command_set_by_operator": True,
                },
            )
            self.stdout.write("Registered the demo MCP server as 'demo'.")
