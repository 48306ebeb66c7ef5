"""The operator's outbound limits, checked where a server is registered (form and import).

The same limits are checked again by the worker each time a connection opens
(sessions/mcp/ssrf.py, sessions/mcp/commands.py); these checks only say so earlier, in the form.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from sessions.mcp.commands import CommandRefused, allowed_command
from sessions.mcp.ssrf import NetworkPolicy, refusal


def network_policy() -> NetworkPolicy:
    return NetworkPolicy(allow_private=settings.PORTAL_ALLOW_PRIVATE_NETWORK)


def command_error(command: str, env: dict[str, Any] | None = None, cwd: str | None = None) -> str:
    """Why the allowlist refuses this stdio command, or "" (a ${VAR} command is checked when it starts)."""
    command = command.strip()
    if not settings.PORTAL_STDIO_COMMANDS or not command or "${" in command:
        return ""
    path = (env or {}).get("PATH")
    try:
        allowed_command(command, settings.PORTAL_STDIO_COMMANDS, path if isinstance(path, str) else None, cwd)
    except CommandRefused:
        return f"This portal may only start these executables: {', '.join(settings.PORTAL_STDIO_COMMANDS)}."
    return ""


def address_error(url: str) -> str:
    """Why a URL naming an IP address is refused, or "": names are resolved and checked when connecting."""
    try:
        host = urlsplit(url).hostname or ""
        address = ipaddress.ip_address(host)
    except ValueError:
        return ""
    reason = refusal(address, network_policy())
    return f"{host} is {reason}: the portal will not connect to it." if reason else ""
