"""The operator's outbound limits, checked where a server is registered (form and import).

The same limits are checked again by the worker each time a connection opens
(sessions/mcp/ssrf.py, commands.py, sandbox.py); these checks only say so earlier, in the form.
"""

from __future__ import annotations

import ipaddress
import os
import shlex
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from sessions.mcp.commands import command_allowed, parse_templates, refused_env_names
from sessions.mcp.sandbox import Bind, SandboxPolicy
from sessions.mcp.ssrf import NetworkPolicy, refusal


def network_policy() -> NetworkPolicy:
    return NetworkPolicy(allow_private=settings.PORTAL_ALLOW_PRIVATE_NETWORK)


def free_form_commands(operator: bool) -> bool:
    """Whether these hands may register any stdio command: an operator's, or any admin's if the operator said so."""
    return operator or settings.PORTAL_STDIO_ANY_COMMAND_FOR_ADMINS


def allowed_commands(operator: bool) -> tuple[str, ...] | None:
    """The list a command is checked against at start; None: any (sessions.mcp.commands.check_command)."""
    return None if free_form_commands(operator) else tuple(settings.PORTAL_STDIO_COMMANDS)


def command_error(command: str, args: Sequence[str] = (), cwd: str | None = None, operator: bool = False) -> str:
    """Why this stdio command may not be registered by these hands, or "" (a ${VAR} command is checked when it starts)."""
    command = command.strip()
    if free_form_commands(operator) or not command or "${" in command:
        return ""
    if command_allowed(command, list(args), settings.PORTAL_STDIO_COMMANDS, os.environ.get("PATH"), cwd):
        return ""
    if not settings.PORTAL_STDIO_COMMANDS:
        return (
            f"{shlex.join([command, *args])!r} is not allowed: this portal lets team admins start no stdio "
            "commands. An operator (superuser) can register it, or allow it in PORTAL_STDIO_COMMANDS."
        )
    listed = "; ".join(template.text for template in parse_templates(settings.PORTAL_STDIO_COMMANDS))
    return (
        f"{shlex.join([command, *args])!r} is not allowed. Team admins may start only these commands "
        f"({{name}} is a part you fill in, ... any further arguments): {listed}."
    )


def env_error(env: dict[str, Any] | None) -> str:
    """Why a stdio server's environment is refused, or ""."""
    refused = refused_env_names(env or {})
    if not refused:
        return ""
    return (
        f"A server may not set {', '.join(refused)}: these names change how a program starts "
        "(the loader's LD_*, PYTHON* startup hooks, NODE_OPTIONS, shell startup files, PATH)."
    )


def sandbox_enabled() -> bool:
    return settings.PORTAL_STDIO_SANDBOX != "off"


def sandbox_policy(network: bool) -> SandboxPolicy | None:
    """The sandbox a stdio server runs in, from the operator's settings; None if they turned it off."""
    if not sandbox_enabled():
        return None
    hidden = [str(settings.VAR_DIR), str(settings.BASE_DIR / "var"), str(settings.BASE_DIR / ".git")]
    for name in ("DJANGO_SECRET_KEY_FILE", "PORTAL_ENCRYPTION_KEYS_FILE"):
        if os.environ.get(name):
            hidden.append(os.environ[name])
    return SandboxPolicy(
        bwrap=settings.PORTAL_STDIO_BWRAP,
        network=network,
        binds=tuple(Bind.parse(path) for path in settings.PORTAL_STDIO_BIND_PATHS),
        hidden=tuple(os.path.abspath(path) for path in hidden),
    )


def address_error(url: str) -> str:
    """Why a URL naming an IP address is refused, or "": names are resolved and checked when connecting."""
    try:
        host = urlsplit(url).hostname or ""
        address = ipaddress.ip_address(host)
    except ValueError:
        return ""
    reason = refusal(address, network_policy())
    return f"{host} is {reason}: the portal will not connect to it." if reason else ""
