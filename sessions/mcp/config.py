"""What the portal knows about one MCP server, as the worker needs it to connect."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

Transport = Literal["stdio", "http"]
TRANSPORTS: tuple[Transport, ...] = ("stdio", "http")
LOCAL_TRANSPORTS: frozenset[str] = frozenset({"stdio"})


@dataclass(frozen=True)
class ServerConfig:
    """A server's connection settings: plain data, built by Django code from a `Server` row."""

    name: str
    transport: Transport
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    request_timeout: float = 60.0
    connect_timeout: float = 30.0
    # An httpx2.Auth for HTTP transports (the user's OAuth provider, sessions/mcp/auth.py).
    # Not data: left out of comparisons and of the fingerprint.
    auth: Any = field(default=None, compare=False, repr=False)

    @property
    def is_local(self) -> bool:
        return self.transport in LOCAL_TRANSPORTS

    def fingerprint(self) -> str:
        """A hash of everything that shapes the connection itself.

        Part of the pool key, so that editing a server's command or URL gives the next
        call a fresh connection instead of the stale one. Timeouts apply per request and
        are left out: changing them must not cost a reconnect.
        """
        shape = {
            "transport": self.transport,
            "command": self.command,
            "args": list(self.args),
            "env": self.env,
            "cwd": self.cwd,
            "url": self.url,
            "headers": self.headers,
        }
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ConnectionKey:
    """Which live session a call uses: one per (server, config, credential owner)."""

    server_id: int
    fingerprint: str
    owner: str

    @classmethod
    def for_owner(cls, server_id: int, config: ServerConfig, owner: str) -> ConnectionKey:
        return cls(server_id, config.fingerprint(), owner)
