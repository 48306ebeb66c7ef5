"""Personal access tokens for the portal's MCP endpoint: made, checked, revoked.

A token is `mcpp_` and 43 URL-safe characters (256 random bits). Only its SHA-256 is stored: a fast
hash is enough for a secret this long (there is nothing to guess), and it lets the check be one
indexed lookup. The full token is shown once, when made.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from servers.models import Server

from .models import AccessToken

PREFIX = "mcpp_"
# A token's "last used" is written at most this often: not one extra write per call.
LAST_USED_EVERY = timedelta(minutes=1)


class TokenError(Exception):
    """A token request the portal will not act on; the text is for the person or the operator."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


@transaction.atomic
def do_create_token(
    user: Any, name: str, servers: list[Server] | None = None, expires_days: int | None = None
) -> tuple[AccessToken, str]:
    """A new token for `user` (returned with its one-time text), limited to `servers` (each one the
    user may use) when given, expiring after `expires_days` when given."""
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise TokenError("Give the token a name of 1 to 100 characters (where it is used, say).")
    if expires_days is not None and not 1 <= expires_days <= 3650:
        raise TokenError("A token expires after 1 to 3650 days, or never.")
    servers = list(servers or [])
    usable = set(Server.objects.usable_by(user).values_list("pk", flat=True))
    foreign = [s.name for s in servers if s.pk not in usable]
    if foreign:
        raise TokenError(f"You cannot use {', '.join(sorted(foreign))}, so a token of yours cannot either.")
    text = PREFIX + secrets.token_urlsafe(32)
    token = AccessToken.objects.create(
        user=user,
        name=name,
        digest=digest(text),
        prefix=text[: len(PREFIX) + 4],
        expires_at=timezone.now() + timedelta(days=expires_days) if expires_days else None,
        limited=bool(servers),
    )
    if servers:
        token.servers.set(servers)
    return token, text


def do_revoke_token(user: Any, token_id: Any) -> AccessToken:
    """Revoked at once: the next request with it is refused. Another person's token reads as unknown."""
    # isdecimal, not isdigit: "²" is a digit that int() refuses.
    token = AccessToken.objects.filter(pk=int(token_id), user=user).first() if str(token_id).isdecimal() else None
    if token is None:
        raise TokenError("Unknown token.")
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


@dataclass
class Agent:
    """Who is calling the endpoint: a person, through one credential (a token of theirs)."""

    user: Any
    # The personal access token used, if that was the credential (None for an OAuth access token).
    token: AccessToken | None = None
    # Server ids the credential is limited to; None for every server the person may use.
    servers: frozenset[int] | None = None
    # What identifies the credential (a session is bound to it), never the secret itself.
    credential: str = ""
    scopes: list[str] = field(default_factory=list)

    def may_use(self, server_id: int) -> bool:
        return self.servers is None or server_id in self.servers


def check_token(text: str) -> Agent | None:
    """The agent a personal access token stands for, or None (unknown, revoked, expired, or its
    owner deactivated): all read alike to the caller."""
    if not text.startswith(PREFIX) or len(text) > 200:
        return None
    token = AccessToken.objects.select_related("user").filter(digest=digest(text)).first()
    if token is None or not token.active or not token.user.is_active:
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_EVERY:
        AccessToken.objects.filter(pk=token.pk).update(last_used_at=now)
    # A limited token whose servers were all deleted reaches none (an empty set), never all of them.
    limited = frozenset(token.servers.values_list("pk", flat=True)) if token.limited else None
    return Agent(user=token.user, token=token, servers=limited, credential=f"pat:{token.pk}")
