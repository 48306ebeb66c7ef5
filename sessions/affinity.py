"""Which worker holds a (server, owner) session, so its calls go there (docs/connections.md, "Affinity").

Every worker consumes the shared queue and a queue of its own, `<shared>.worker.<name>`. The worker
that opens a connection records key → its queue in the cache (Redis in the distributed mode), and
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


def route(server: Any, user_id: int) -> str:
    """The worker to send work for `user_id`'s session with `server` to: the live one holding it, or "" for any.

    The embedded mode has one worker, in the portal's own process: there is nowhere else to route,
    so it does not work out the session's key (a credentials query) or ask the cache.
    """
    if settings.EMBEDDED:
        return ""
    try:
        return holder(connection_key_for(server, user_id)) or ""
    except Exception:  # noqa: BLE001 - a cache outage costs affinity, not the call
        log.warning("affinity lookup failed; using the shared queue", exc_info=True)
        return ""


def send(task: Any, worker: str, args: tuple[Any, ...]) -> str:
    """Enqueue `task(*args)` on `worker`'s own queue ("" for the shared queue); returns the queue used.

    A task sent to a worker that dies before running it is not lost: calls record the worker they
    were routed to, and the other workers' sweep sends them again to the shared queue
    (sessions/worker.py, Sweeper). Claiming a call is a compare-and-set, so a copy runs at most once.
    """
    queue = own_queue(worker) if worker else shared_queue()
    task.apply_async(args, queue=queue)
    return queue
