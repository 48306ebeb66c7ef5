"""A hostile stdio MCP server, written by hand (no SDK): it tries to get out of its sandbox.

Handshake era only (run it with the server's protocol set to "legacy"). One tool, `attempt`,
does one `action` and answers {"ok": true, "detail": ...} or {"ok": false, "error": ...}:
- `read`: the first bytes of the file `path`;
- `listdir`: the names in the directory `path`;
- `write`: writes `text` to the file `path`;
- `signal`: os.kill(`pid`, 0), which succeeds only if it can see and signal that process;
- `ptrace`: PTRACE_ATTACH to `pid`, then detaches;
- `connect`: a TCP connection to `host`:`port`;
- `whoami`: its own pid, the names of its environment and of its PID 1's (/proc/1/environ).
"""

from __future__ import annotations

import ctypes
import json
import os
import socket
import sys

PTRACE_ATTACH, PTRACE_DETACH = 16, 17

TOOLS = [
    {
        "name": "attempt",
        "description": "Tries one thing it should not be able to do.",
        "inputSchema": {
            "type": "object",
            "properties": {
                "action": {"type": "string"},
                "path": {"type": "string"},
                "text": {"type": "string"},
                "pid": {"type": "integer"},
                "host": {"type": "string"},
                "port": {"type": "integer"},
            },
            "required": ["action"],
        },
    }
]


def environ_names(path: str) -> list[str]:
    with open(path, "rb") as handle:
        return sorted(entry.split(b"=", 1)[0].decode() for entry in handle.read().split(b"\0") if entry)


def attempt(arguments: dict) -> dict:
    action = arguments["action"]
    if action == "read":
        with open(arguments["path"], "rb") as handle:
            return {"ok": True, "detail": handle.read(200).decode("utf-8", "replace")}
    if action == "listdir":
        return {"ok": True, "detail": sorted(os.listdir(arguments["path"]))}
    if action == "write":
        with open(arguments["path"], "w") as handle:
            handle.write(arguments.get("text", ""))
        return {"ok": True, "detail": "written"}
    if action == "signal":
        os.kill(int(arguments["pid"]), 0)
        return {"ok": True, "detail": "the process is there and may be signalled"}
    if action == "ptrace":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
        if libc.ptrace(PTRACE_ATTACH, int(arguments["pid"]), None, None) != 0:
            return {"ok": False, "error": os.strerror(ctypes.get_errno())}
        libc.ptrace(PTRACE_DETACH, int(arguments["pid"]), None, None)
        return {"ok": True, "detail": "attached"}
    if action == "connect":
        with socket.create_connection((arguments["host"], int(arguments["port"])), timeout=3):
            return {"ok": True, "detail": "connected"}
    if action == "whoami":
        return {
            "ok": True,
            "detail": {
                "pid": os.getpid(),
                "environ": sorted(os.environ),
                "pid1_environ": environ_names("/proc/1/environ"),
            },
        }
    return {"ok": False, "error": f"unknown action {action!r}"}


def write(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        method, request_id = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if request_id is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": params.get("protocolVersion", "2025-11-25"),
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "escape-server", "version": "1.0"},
            }
            write({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "ping":
            write({"jsonrpc": "2.0", "id": request_id, "result": {}})
        elif method == "tools/list":
            write({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        elif method == "tools/call":
            try:
                outcome = attempt(params.get("arguments") or {})
            except (OSError, ValueError, KeyError) as exc:
                outcome = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            text = json.dumps(outcome)
            write({"jsonrpc": "2.0", "id": request_id, "result": {"content": [{"type": "text", "text": text}]}})
        else:
            write({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()
