"""Which worker holds a (server, owner) session, so its calls go there (docs/connections.md, "Affinity").

Every worker consumes the shared queue and a queue of its own, `<shared>.worker.<name>`. The worker
that opens a connection records key → its queue in the cache (Redis in the distributed mode), and
keeps the entry alive from its heartbeat while the connection lives. A call is routed to that queue
while the worker's own heartbeat is fresh, else to the shared queue, where any worker picks it up
and opens the session anew. A call routed to a worker that died before its heartbeat ran out is
also sent to the shared queue with a countdown; claiming a call is a compare-and-set, so whichever
copy comes second does nothing.
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


def shared_queue() -> str:
    return settings.CELERY_TASK_DEFAULT_QUEUE


def own_queue(name: str = WORKER_NAME) -> str:
    return f"{shared_queue()}.worker.{name}"


def heartbeat_ttl() -> int:
    return int(settings.PORTAL_WORKER_HEARTBEAT_SECONDS * 3) + 1


def beat(name: str = WORKER_NAME) -> None:
    cache.set(HEARTBEAT_PREFIX + name, True, timeout=heartbeat_ttl())


def is_alive(name: str) -> bool:
    return bool(cache.get(HEARTBEAT_PREFIX + name))


def record(keys: list[ConnectionKey], name: str = WORKER_NAME) -> None:
    """Say this worker holds these sessions (refreshed with each heartbeat)."""
    if keys:
        cache.set_many({SESSION_PREFIX + str(key): name for key in keys}, timeout=heartbeat_ttl())


def forget(key: ConnectionKey, name: str = WORKER_NAME) -> None:
    entry = SESSION_PREFIX + str(key)
    if cache.get(entry) == name:
        cache.delete(entry)


def stop(name: str = WORKER_NAME) -> None:
    """A worker going away on purpose: its calls fail over at once instead of after the heartbeat TTL."""
    cache.delete(HEARTBEAT_PREFIX + name)


def holder(key: ConnectionKey) -> str | None:
    """The live worker that holds the session for `key`, if any."""
    name = cache.get(SESSION_PREFIX + str(key))
    if name and is_alive(name):
        return name
    return None


def connection_key_for(server: Any, user_id: int) -> ConnectionKey:
    """The pool key a call by `user_id` to `server` will use (credentials decide it: sessions/credentials.py)."""
    from .credentials import connection_key

    return connection_key(server, user_id)


def send(task: Any, key: ConnectionKey, args: tuple[Any, ...], backup: bool = False) -> str:
    """Enqueue `task(*args)` where the session for `key` lives; returns the queue used.

    With `backup`, a copy also goes to the shared queue after the affinity grace, for the case
    where the holder died after its last heartbeat (the task must be safe to run twice).
    """
    try:
        name = holder(key)
    except Exception:  # noqa: BLE001 - a cache outage costs affinity, not the call
        log.warning("affinity lookup failed; using the shared queue", exc_info=True)
        name = None
    if name is None:
        task.apply_async(args, queue=shared_queue())
        return shared_queue()
    queue = own_queue(name)
    task.apply_async(args, queue=queue)
    if backup:
        task.apply_async(args, queue=shared_queue(), countdown=settings.PORTAL_AFFINITY_GRACE_SECONDS)
    return queue
