"""One worker step in a process of its own: `python -m tests.worker_step SERVER_ID USER_ID [TOOL]`.

A fresh process has nothing in memory, as a restarted worker has not. It builds the
connection exactly as the worker does (sessions.credentials.prepare: secrets, the OAuth
provider over the encrypted store) and lists tools, or calls one, on the worker's pool.
It prints "ready", waits for a line on stdin (so tests can start several at once), and
prints the outcome as JSON.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")


def main() -> None:
    import django

    django.setup()
    from servers.models import Server
    from sessions import credentials
    from sessions.mcp.failure import ConnectionFailed
    from sessions.mcp.pool import ConnectionPool

    server_id, user_id = int(sys.argv[1]), int(sys.argv[2])
    tool = sys.argv[3] if len(sys.argv) > 3 else None
    server = Server.objects.get(pk=server_id)
    print("ready", flush=True)
    sys.stdin.readline()
    prepared = credentials.prepare(server, user_id)
    pool = ConnectionPool()
    try:
        if prepared.failure is not None:
            raise ConnectionFailed(prepared.failure)
        if tool is None:
            tools = pool.run(pool.list_tools(prepared.key, prepared.config), timeout=60)
            outcome = {"ok": True, "tools": [t["name"] for t in tools]}
        else:
            called = pool.run(pool.call_tool(prepared.key, prepared.config, tool, {}), timeout=60)
            outcome = {"ok": called.status == "succeeded", "status": called.status, "result": called.result}
            if called.failure:
                outcome["failure"] = called.failure.as_dict()
    except ConnectionFailed as exc:
        outcome = {"ok": False, "failure": exc.failure.as_dict()}
    finally:
        pool.shutdown()
    print(json.dumps(outcome), flush=True)


if __name__ == "__main__":
    main()
