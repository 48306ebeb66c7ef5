"""A misbehaving MCP server over stdio, written by hand (no SDK) so it can break the protocol on purpose.

Handshake era only (run it with the server's protocol set to "legacy"). Its tools:
- `environment`: the names of the environment variables it was started with;
- `hang`: writes its pid to `pidfile` and keeps the file open, then never answers (a test kills it mid-call);
- `wait_for`: answers once the file `path` exists (a test decides when the call ends);
- `flood`: `count` progress notifications and `count` log messages, then the answer;
- `huge`: an answer of `megabytes` MB of text;
- `nul`: an answer with a NUL character in it (no PostgreSQL text can hold one);
- `mismatch`: structured content that breaks the tool's own output schema;
- `garbage`: lines that are not JSON-RPC (and answers to requests never made), then the answer;
- `garbage_only`: the same lines and no answer at all;
- `grow`: adds `count` tools one by one, saying after each that its tool list changed;
- `log_after`: answers, then logs a line that belongs to no call.
- `prefixed_error`: a JSON-RPC error whose message already says "MCP error -32602:", as servers on
  the TypeScript SDK send them.
"""

from __future__ import annotations

import json
import os
import sys
import time

TOOLS = [
    {
        "name": "environment",
        "description": "Names of the environment variables.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "hang",
        "description": "Never answers.",
        "inputSchema": {"type": "object", "properties": {"pidfile": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "wait_for",
        "description": "Answers once a file exists.",
        "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "flood",
        "description": "Floods the client with notifications.",
        "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "huge",
        "description": "A very large answer.",
        "inputSchema": {"type": "object", "properties": {"megabytes": {"type": "integer"}}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "nul",
        "description": "An answer with NUL characters in it.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "mismatch",
        "description": "Declares an output schema, then answers with structured content that breaks it.",
        "inputSchema": {"type": "object"},
        "outputSchema": {
            "type": "object",
            "properties": {"count": {"type": "integer"}},
            "required": ["count"],
        },
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "garbage",
        "description": "Invalid JSON-RPC, then the answer.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "prefixed_error",
        "description": "An error whose message carries its own code.",
        "inputSchema": {"type": "object"},
    },
    {
        "name": "garbage_only",
        "description": "Invalid JSON-RPC and no answer.",
        "inputSchema": {"type": "object"},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "grow",
        "description": "Adds tools one by one.",
        "inputSchema": {"type": "object", "properties": {"count": {"type": "integer"}}},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "log_after",
        "description": "Answers, then logs outside the call.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": True},
    },
]

HELD: list = []  # files kept open for as long as the process lives

GARBAGE = [
    "this is not json",
    "{",
    '{"jsonrpc": "1.0", "id": 1}',
    '{"jsonrpc": "2.0", "id": 999999, "result": {"content": []}}',  # an answer to no request
    '{"jsonrpc": "2.0", "method": 42}',
    "[1, 2, 3]",
    '"\\ud800"',
    "\x00\x01\x02",
]


def write(message: dict | str) -> None:
    line = message if isinstance(message, str) else json.dumps(message)
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def text_result(request_id, text: str) -> None:
    write({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})


def call(request_id, name: str, arguments: dict, meta: dict) -> None:
    if name == "environment":
        text_result(request_id, json.dumps(sorted(os.environ)))
    elif name == "hang":
        if arguments.get("pidfile"):
            # Kept open: in its sandbox this pid is its own PID namespace's, so the test finds the
            # process to kill as the one holding this file (tests/faults/conftest.py, holder_of).
            HELD.append(open(arguments["pidfile"], "w"))  # noqa: SIM115
            HELD[-1].write(str(os.getpid()))
            HELD[-1].flush()
        # No answer, ever: the test kills this process (or the call times out).
    elif name == "wait_for":
        while not os.path.exists(arguments["path"]):
            time.sleep(0.02)
        text_result(request_id, "the file is there")
    elif name == "flood":
        count = int(arguments.get("count", 1000))
        token = meta.get("progressToken")
        for index in range(count):
            if token is not None:
                write(
                    {
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": {"progressToken": token, "progress": index + 1, "total": count},
                    }
                )
            write(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "data": f"flood {index}"},
                }
            )
        text_result(request_id, f"sent {count} of each")
    elif name == "huge":
        size = int(arguments.get("megabytes", 50)) * 1024 * 1024
        text_result(request_id, "x" * size)
    elif name == "nul":
        text_result(request_id, "before\x00after")
    elif name == "mismatch":
        write(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": {"content": [{"type": "text", "text": "many"}], "structuredContent": {"count": "many"}},
            }
        )
    elif name in ("garbage", "garbage_only"):
        for line in GARBAGE:
            write(line)
        if name == "garbage":
            text_result(request_id, "answered after the garbage")
    elif name == "grow":
        for _ in range(int(arguments.get("count", 5))):
            TOOLS.append({"name": f"grown_{len(TOOLS)}", "inputSchema": {"type": "object"}})
            write({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        text_result(request_id, f"{len(TOOLS)} tools")
    elif name == "log_after":
        text_result(request_id, "answered")
        # The answer is in: the line below arrives once the portal has ended the call (a wide margin,
        # for a loaded machine), so no call is in flight to claim it.
        time.sleep(1.0)
        message = {"level": "warning", "logger": "between", "data": arguments.get("text", "between calls")}
        write({"jsonrpc": "2.0", "method": "notifications/message", "params": message})
    elif name == "prefixed_error":
        message = "MCP error -32602: Invalid arguments for tool prefixed_error"
        write({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": message}})
    else:
        write({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": f"Unknown tool: {name}"}})


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if request_id is None:
            continue  # notifications: initialized, cancelled
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "fault-server", "version": "1.0"},
            }
            write({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "ping":
            write({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif method == "tools/list":
            write({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            call(request_id, params.get("name", ""), params.get("arguments") or {}, params.get("_meta") or {})
        else:
            write({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
