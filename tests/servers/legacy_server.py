"""A hand-written handshake-era MCP server over stdio: it answers `initialize` and rejects
`server/discover` with -32601, as servers written before 2026-07-28 do.

Environment: LEGACY_PROTOCOL_VERSION (what initialize answers, default 2025-06-18), LEGACY_LOG (a
file that gets one line per request method received, so tests can see whether a probe was sent).
"""

from __future__ import annotations

import json
import os
import sys

VERSION = os.environ.get("LEGACY_PROTOCOL_VERSION", "2025-06-18")
LOG = os.environ.get("LEGACY_LOG")


def reply(message_id, result=None, error=None) -> None:
    body = {"jsonrpc": "2.0", "id": message_id}
    body.update({"error": error} if error else {"result": result})
    sys.stdout.write(json.dumps(body) + "\n")
    sys.stdout.flush()


def handle(message: dict) -> None:
    method = message.get("method")
    if LOG and method:
        with open(LOG, "a") as log:
            log.write(method + "\n")
    if "id" not in message:
        return  # a notification
    if method == "initialize":
        reply(
            message["id"],
            {
                "protocolVersion": VERSION,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "legacy-test", "version": "0.1"},
            },
        )
    elif method == "ping":
        reply(message["id"], {})
    elif method == "tools/list":
        schema = {"type": "object", "properties": {"name": {"type": "string"}}}
        reply(message["id"], {"tools": [{"name": "hello", "description": "Say hello.", "inputSchema": schema}]})
    elif method == "tools/call":
        name = (message.get("params") or {}).get("arguments", {}).get("name", "world")
        reply(message["id"], {"content": [{"type": "text", "text": f"hello {name}"}], "isError": False})
    else:
        reply(message["id"], error={"code": -32601, "message": f"Method not found: {method}"})


def main() -> None:
    for line in sys.stdin:
        if line.strip():
            handle(json.loads(line))


if __name__ == "__main__":
    main()
