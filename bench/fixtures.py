"""Accounts and servers for one bench run, created inside a portal database.

Run as `python -m bench.fixtures --users N --http-url URL` with the environment of the mode
being measured (embedded or distributed); prints what it made as JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

PASSWORD = "bench-password-not-secret"
TEAM = "Bench"
STDIO_SERVER = "echo-stdio"
HTTP_SERVER = "echo-http"
FAULT_SERVER = "faulty"  # tests/servers/fault_server.py: hangs, floods, huge answers, invalid JSON-RPC


def username(index: int) -> str:
    return f"bench{index:04d}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, required=True)
    parser.add_argument("--http-url", required=True)
    parser.add_argument("--fault-server", action="store_true", help="also register the misbehaving stdio server")
    args = parser.parse_args(argv)

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from servers.actions import do_create_server, do_update_server
    from servers.models import Membership, Role, Server, Team

    call_command("migrate", verbosity=0, interactive=False)
    team, _ = Team.objects.get_or_create(name=TEAM)
    User = get_user_model()
    existing = set(User.objects.filter(username__startswith="bench").values_list("username", flat=True))
    for index in range(args.users):
        name = username(index)
        if name in existing:
            continue
        user = User.objects.create_user(username=name, email=f"{name}@example.com", password=PASSWORD)
        Membership.objects.create(team=team, user=user, role=Role.ADMIN if index == 0 else Role.MEMBER)

    wanted = {
        STDIO_SERVER: {
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-m", "sessions.mcp.demo_server"],
            "cwd": str(settings.BASE_DIR),
        },
        HTTP_SERVER: {"transport": "http", "url": args.http_url},
    }
    if args.fault_server:
        wanted[FAULT_SERVER] = {
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.servers.fault_server"],
            "cwd": str(settings.BASE_DIR),
            "protocol": "legacy",
            "request_timeout": 5,
        }
    ids = {}
    for name, fields in wanted.items():
        server = Server.objects.filter(team=team, name=name).first()
        if server is None:
            server = do_create_server(team, None, {"name": name, **fields})
        else:
            server = do_update_server(server, fields)
        ids["fault" if name == FAULT_SERVER else fields["transport"]] = server.pk
    names = [username(i) for i in range(args.users)]
    people = {user.username: user for user in User.objects.filter(username__in=names)}
    # A personal access token each, for the MCP endpoint series (shown once: kept by this run only).
    from sessions.access_tokens import do_create_token

    tokens = [do_create_token(people[n], "bench")[1] for n in names]
    from servers.models import Effect, PermissionRule

    # The endpoint's calls run without asking, as the playground's do (echo is read-only anyway).
    PermissionRule.objects.get_or_create(team=team, user=None, pattern=f"mcp__{HTTP_SERVER}", effect=Effect.ALLOW)
    json.dump(
        {
            "password": PASSWORD,
            "users": names,
            "user_ids": [people[n].pk for n in names],
            "servers": ids,
            "tokens": tokens,
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
