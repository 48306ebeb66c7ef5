"""`python manage.py export_servers [--team T] [--format vscode]`: a team's servers as mcpServers JSON on stdout."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from servers import mcp_json
from servers.models import Server, Team


def pick_team(name: str | None) -> Team:
    if name:
        team = Team.objects.filter(name=name).first()
        if team is None:
            raise CommandError(f"No team named {name!r}.")
        return team
    teams = list(Team.objects.order_by("name")[:2])
    if len(teams) != 1:
        raise CommandError("There are several teams: say which with --team." if teams else "There are no teams yet.")
    return teams[0]


class Command(BaseCommand):
    help = "Print a team's servers as mcpServers JSON. Secret values are replaced by ${VAR} placeholders."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--team", help="The team's name (needed when there are several teams).")
        parser.add_argument("--format", choices=["claude", "vscode"], default="claude")

    def handle(self, *args: Any, **options: Any) -> None:
        team = pick_team(options["team"])
        shape = "servers" if options["format"] == "vscode" else "mcpServers"
        config, notes = mcp_json.export(Server.objects.filter(team=team), shape)
        self.stdout.write(json.dumps(config, indent=2))
        # Notes go to stderr so that stdout stays a valid file.
        for note in notes:
            self.stderr.write(f"note: {note}")
