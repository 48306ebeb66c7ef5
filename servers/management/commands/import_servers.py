"""`python manage.py import_servers FILE [--team T] [--dry-run]`: an mcpServers config into a team."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from servers import actions
from servers.management.commands.export_servers import pick_team


class Command(BaseCommand):
    help = "Import the servers of an mcpServers JSON file (Claude Desktop, Claude Code, Cursor, VS Code) into a team."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help="The config file, or - for standard input.")
        parser.add_argument("--team", help="The team's name (needed when there are several teams).")
        parser.add_argument("--dry-run", action="store_true", help="Show what would be created; create nothing.")

    def handle(self, *args: Any, **options: Any) -> None:
        team = pick_team(options["team"])
        try:
            text = sys.stdin.read() if options["file"] == "-" else Path(options["file"]).read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"Cannot read {options['file']}: {exc}") from None
        if options["dry_run"]:
            plan, created = actions.plan_import(team, text, operator=True), []
        else:
            # Run by the operator, on the host: the commands are theirs, as a superuser's would be.
            plan, created = actions.do_import_servers(team, None, text, operator=True)
        if plan.error:
            raise CommandError(f"{plan.error} Nothing was created.")
        for entry in plan.entries:
            line = f"{entry.status:<11} {entry.name:<24} {entry.transport or '-':<9} {entry.target}"
            self.stdout.write(line + (f"  ({entry.message})" if entry.message else ""))
            for note in entry.notes:
                self.stdout.write(f"{'':<12}{note}")
            if entry.placeholders:
                self.stdout.write(f"{'':<12}placeholders to fill in: {' '.join(entry.placeholders)}")
        if not plan.ok:
            raise CommandError("Some entries have errors; nothing was created.")
        verb = "Would create" if options["dry_run"] else "Created"
        count = len(plan.to_create) if options["dry_run"] else len(created)
        self.stdout.write(self.style.SUCCESS(f"{verb} {count} server(s) in {team.name}."))
