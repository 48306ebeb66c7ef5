"""A hand-written handshake-era MCP server over stdio: it answers `initialize` and rejects
`server/discover` with -32601, as servers written before 2026-07-28 do.

Environment: LEGACY_PROTOCOL_VERSION (what initialize answers, default 2025-06-18), LEGACY_LOG (a
file that gets one line per request method received, so tests can see whether a probe was sent),
LEGACY_TOOL_PAGES (hand out the tools over that many pages, default 1), LEGACY_NO_TOOLS (declare no
tools capability), LEGACY_SILENT_DISCOVER (never answer server/discover, as some old servers do).
"""

from __future__ import annotations

import json
import os
import sys

VERSION = os.environ.get("LEGACY_PROTOCOL_VERSION", "2025-06-18")
LOG = os.environ.get("LEGACY_LOG")
PAGES = int(os.environ.get("LEGACY_TOOL_PAGES", "1"))
NO_TOOLS = bool(os.environ.get("LEGACY_NO_TOOLS"))
SILENT_DISCOVER = bool(os.environ.get("LEGACY_SILENT_DISCOVER"))
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}


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
    if "id" not in message or (method == "server/discover" and SILENT_DISCOVER):
        return  # a notification, or a probe this server ignores
    if method == "initialize":
        reply(
            message["id"],
            {
                "protocolVersion": VERSION,
                "capabilities": {} if NO_TOOLS else {"tools": {}},
                "serverInfo": {"name": "legacy-test", "version": "0.1"},
            },
        )
    elif method == "ping":
        reply(message["id"], {})
    elif method == "tools/list":
        page = int((message.get("params") or {}).get("cursor") or 0)
        tools = [
            {"name": "hello" if page == 0 else f"hello_{page}", "description": "Say hello.", "inputSchema": SCHEMA}
        ]
        result = {"tools": tools}
        if page + 1 < PAGES:
            result["nextCursor"] = str(page + 1)
        reply(message["id"], result)
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
