"""Which worker holds a (server, owner) session, so its calls go there (docs/connections.md, "Affinity").

Every worker consumes the shared queue and a queue of its own, `<shared>.worker.<name>`. The worker
that opens a connection records (server, owner) → its name in the cache (Redis in the distributed mode), and
keeps the entry alive from its heartbeat while the connection lives. A call is routed to that queue
while the worker's own heartbeat is fresh, else to the shared queue, where any worker picks it up
and opens the session anew. A call records the worker it was routed to; if that worker dies before
claiming it, the other workers' sweep sends it again to the shared queue once the dead worker's
heartbeat has been missing for its TTL. Claiming a call is a compare-and-set, so whichever copy
comes second does nothing.
"""

from __future__ import annotations

import logging
import os
import socket
from typing import Any

from django.conf import settings
from django.core.cache import cache

from .mcp.config import ConnectionKey

log = logging.getLogger(__name__)

WORKER_NAME = f"{socket.gethostname()}:{os.getpid()}"
HEARTBEAT_PREFIX = "portal:worker-alive:"
SESSION_PREFIX = "portal:session-worker:"
# The last heartbeat of any worker, for /healthz (written by the heartbeat thread, sessions/worker/liveness.py).
HEARTBEAT_KEY = "portal:worker-heartbeat"


def shared_queue() -> str:
    return settings.CELERY_TASK_DEFAULT_QUEUE


def own_queue(name: str = WORKER_NAME) -> str:
    return f"{shared_queue()}.worker.{name}"


def heartbeat_ttl() -> int:
    return int(settings.PORTAL_WORKER_HEARTBEAT_SECONDS * 3) + 1


def beat(name: str = WORKER_NAME) -> None:
    cache.set(HEARTBEAT_PREFIX + name, True, timeout=heartbeat_ttl())


def last_heartbeat() -> dict[str, Any] | None:
    return cache.get(HEARTBEAT_KEY)


def is_alive(name: str) -> bool:
    return bool(cache.get(HEARTBEAT_PREFIX + name))


def _entry(server_id: int, owner: str) -> str:
    # By (server, owner), not by the whole pool key: routing must not need the credentials that are
    # part of the key (a query per call), and a session reopened with new credentials lives in the
    # same worker as the one it replaces.
    return f"{SESSION_PREFIX}{server_id}:{owner}"


def record(keys: list[ConnectionKey], name: str = WORKER_NAME) -> None:
    """Say this worker holds these sessions (refreshed with each heartbeat)."""
    if keys:
        cache.set_many({_entry(key.server_id, key.owner): name for key in keys}, timeout=heartbeat_ttl())


def forget(key: ConnectionKey, name: str = WORKER_NAME) -> None:
    entry = _entry(key.server_id, key.owner)
    if cache.get(entry) == name:
        cache.delete(entry)


def stop(name: str = WORKER_NAME) -> None:
    """A worker going away on purpose: its calls fail over at once instead of after the heartbeat TTL."""
    cache.delete(HEARTBEAT_PREFIX + name)


def holder(server_id: int, owner: str) -> str | None:
    """The live worker that holds `owner`'s session with the server, if any."""
    name = cache.get(_entry(server_id, owner))
    if name and is_alive(name):
        return name
    return None


def route(server: Any, user_id: int) -> str:
    """The worker to send work for `user_id`'s session with `server` to: the live one holding it, or "" for any.

    The embedded mode has one worker, in the portal's own process: there is nowhere else to route,
    so it does not work out the session's key (a credentials query) or ask the cache.
    """
    if settings.EMBEDDED:
        return ""
    try:
        return holder(server.pk, server.connection_owner(user_id)) or ""
    except Exception:  # noqa: BLE001 - a cache outage costs affinity, not the call
        log.warning("affinity lookup failed; using the shared queue", exc_info=True)
        return ""
