"""What a person's connection to a server needs, as any process may ask it: without decrypting a
credential, connecting, or loading the MCP client (a web process never does).

The connection's owner, the revision of the credentials that apply, the needs-auth cache (a server
that asked for authorization is not asked again for a while), and the news for the workers that a
credential changed (sessions/credentials.py acts on it).
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.conf import settings
from django.core.cache import cache

from .mcp.owner import Owner


def owner_of(user_id: int) -> Owner:
    return Owner.user(user_id)


def revision(rows: list[Any]) -> str:
    """Changes when a person sets, replaces or removes a credential, not when a token refreshes."""
    marks = sorted(f"{row.pk}.{row.generation}" for row in rows)
    return hashlib.sha256(",".join(marks).encode()).hexdigest()[:12]


# -- the needs-auth cache (per owner and server) ---------------------------------------------------


def _needs_auth_key(server_id: int, owner: str) -> str:
    return f"portal:needs-auth:{server_id}:{owner}"


def mark_needs_auth(server_id: int, owner: str, message: str, revision: str) -> None:
    entry = {"message": message, "revision": revision}
    cache.set(_needs_auth_key(server_id, owner), entry, timeout=settings.PORTAL_NEEDS_AUTH_SECONDS)


def clear_needs_auth(server_id: int, owner: str) -> None:
    cache.delete(_needs_auth_key(server_id, owner))


def known_needs_auth(server_id: int, owner: str, revision: str | None = None) -> dict[str, Any] | None:
    """The cached "needs your authorization", unless the credentials changed since (the user connected)."""
    entry = cache.get(_needs_auth_key(server_id, owner))
    if entry is None or (revision is not None and entry.get("revision") != revision):
        return None
    return entry


def credential_changed_message(server_id: int, owner: str) -> dict[str, Any]:
    """For the workers' group (sessions/events.py, tell_workers): close the connections that used
    the old credential."""
    return {"type": "credential.changed", "server": server_id, "owner": owner}
