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


def username(index: int) -> str:
    return f"bench{index:04d}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--users", type=int, required=True)
    parser.add_argument("--http-url", required=True)
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
    ids = {}
    for name, fields in wanted.items():
        server = Server.objects.filter(team=team, name=name).first()
        if server is None:
            server = do_create_server(team, None, {"name": name, **fields})
        else:
            server = do_update_server(server, fields)
        ids[fields["transport"]] = server.pk
    names = [username(i) for i in range(args.users)]
    pks = dict(User.objects.filter(username__in=names).values_list("username", "pk"))
    json.dump({"password": PASSWORD, "users": names, "user_ids": [pks[n] for n in names], "servers": ids}, sys.stdout)


if __name__ == "__main__":
    main()
