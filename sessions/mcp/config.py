"""What the portal knows about one MCP server, as the worker needs it to connect."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from .owner import Owner
from .sandbox import SandboxPolicy
from .ssrf import NetworkPolicy

Transport = Literal["stdio", "http", "sse", "websocket"]
TRANSPORTS: tuple[Transport, ...] = ("stdio", "http", "sse", "websocket")
LOCAL_TRANSPORTS: frozenset[str] = frozenset({"stdio"})

# The protocol eras (docs/connections.md): "auto" probes server/discover and falls back to the
# initialize handshake; "legacy" always shakes hands; "modern" speaks 2026-07-28 only.
Protocol = Literal["auto", "legacy", "modern"]
PROTOCOLS: tuple[Protocol, ...] = ("auto", "legacy", "modern")
MODERN_VERSION = "2026-07-28"


@dataclass(frozen=True)
class Negotiated:
    """What a server answered last time, remembered so the next connect skips the discover probe.

    `era` is "legacy" (the initialize handshake) or "modern"; `discover` is the server's
    DiscoverResult as JSON (modern only). Only trusted for the config `fingerprint` it was seen with.
    """

    era: str
    protocol_version: str = ""
    discover: dict[str, Any] | None = None
    fingerprint: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "era": self.era,
            "protocol_version": self.protocol_version,
            "discover": self.discover,
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Negotiated | None:
        if not data or data.get("era") not in ("legacy", "modern"):
            return None
        discover = data.get("discover")
        return cls(
            era=str(data["era"]),
            protocol_version=str(data.get("protocol_version") or ""),
            discover=dict(discover) if isinstance(discover, Mapping) else None,
            fingerprint=str(data.get("fingerprint") or ""),
        )


@dataclass(frozen=True)
class ServerConfig:
    """A server's connection settings: plain data, built by Django code from a `Server` row.

    Text fields may hold `${VAR}`, `${VAR:-default}` and `${secret:NAME}` references; they are
    expanded from `variables` and `secrets` in one pass only when a connection opens
    (sessions/mcp/variables.py), so expanded values live in no stored row, key or log.
    """

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
    # Restart the request deadline whenever the server reports progress, so a long tool that
    # keeps saying how far it got is not cut off (the SDK cannot reset its own timeout).
    reset_timeout_on_progress: bool = False
    log_level: str = "info"  # the least severe server log message wanted; "" for none
    # The file:// roots the server's admin gave it, answered to roots/list.
    roots: tuple[str, ...] = ()
    protocol: Protocol = "auto"
    negotiated: Negotiated | None = None
    # The variables the operator exposes to servers (None: exposed but not set), and the connecting
    # user's decrypted secrets: what the references are filled with, and what the connection's
    # scrubber takes out of everything the server says. Left out of equality, repr and the fingerprint.
    variables: Mapping[str, str | None] = field(default_factory=dict, compare=False, repr=False)
    secrets: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    # An httpx2.Auth for HTTP transports (the user's OAuth provider, sessions/mcp/auth.py).
    # Not data: left out of comparisons and of the fingerprint.
    auth: Any = field(default=None, compare=False, repr=False)
    # The operator's limits, checked when a connection opens (sessions/mcp/ssrf.py, commands.py,
    # sandbox.py): which addresses a URL may reach (strict unless said otherwise); the commands a
    # stdio server may start (executables and templates; None: any, for a command an operator
    # registered, or for callers of this package that choose their commands themselves); and the
    # sandbox it runs in (None: none, only where the operator turned the sandbox off).
    network: NetworkPolicy = field(default=NetworkPolicy(), compare=False)
    allowed_commands: tuple[str, ...] | None = field(default=None, compare=False)
    sandbox: SandboxPolicy | None = field(default=None, compare=False)

    @property
    def is_local(self) -> bool:
        return self.transport in LOCAL_TRANSPORTS

    def fingerprint(self) -> str:
        """A hash of everything that shapes the connection itself.

        Part of the pool key, so that editing a server's command or URL gives the next
        call a fresh connection instead of the stale one. Timeouts apply per request and
        are left out: changing them must not cost a reconnect. The text is hashed before
        `${VAR}` expansion, so no secret value feeds a key that is stored in the cache.
        """
        shape = {
            "transport": self.transport,
            "command": self.command,
            "args": list(self.args),
            "env": self.env,
            "cwd": self.cwd,
            "url": self.url,
            "headers": self.headers,
            "protocol": self.protocol,
            "log_level": self.log_level,  # the client opts in to logs when it is built
        }
        if self.roots:
            # The roots a session was told are its own: new roots, new session. Left out when
            # there are none, so servers without roots keep the fingerprints they had.
            shape["roots"] = list(self.roots)
        if self.sandbox is not None and not self.sandbox.network:
            # A server whose network was turned off must not keep a session that has it; left out
            # when on, so servers keep the fingerprints they had.
            shape["network"] = False
        return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]

    def connect_mode(self) -> tuple[str, dict[str, Any] | None]:
        """The SDK's `mode=` and the DiscoverResult to adopt, from the setting and what was remembered."""
        if self.protocol == "legacy":
            return "legacy", None
        remembered = self.negotiated if self.negotiated and self.negotiated.fingerprint == self.fingerprint() else None
        if self.protocol == "modern":
            return MODERN_VERSION, remembered.discover if remembered and remembered.era == "modern" else None
        if remembered is None:
            return "auto", None
        if remembered.era == "legacy":
            return "legacy", None
        if remembered.discover is not None:
            return MODERN_VERSION, remembered.discover
        return "auto", None


@dataclass(frozen=True)
class ConnectionKey:
    """Which live session a call uses: one per (server, config, credential owner)."""

    server_id: int
    fingerprint: str
    owner: str

    @classmethod
    def for_owner(cls, server_id: int, config: ServerConfig, owner: str) -> ConnectionKey:
        return cls(server_id, config.fingerprint(), owner)

    @property
    def shared(self) -> bool:
        """A team's session (servers.Server.connection_owner): several members' calls share it."""
        return Owner(self.owner).team_id is not None

    def __str__(self) -> str:
        return f"{self.server_id}:{self.fingerprint}:{self.owner}"
