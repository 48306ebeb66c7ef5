"""The one door to workers: every task is sent here, by name.

By name, so that what sends a task (a view, the consumer, an action) never imports the worker and
with it the MCP SDK, and so that messages already queued survive a move of the code that runs them.
Work for one person's session with a server goes to the worker holding that session
(sessions/affinity.py): a call, a resource read and an unsubscribe all reach the process that has the
connection, and no second connection opens elsewhere.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings

from portal.celery import app

from . import affinity

log = logging.getLogger(__name__)


def send(task: str, args: tuple[Any, ...], worker: str = "", countdown: float | None = None) -> str:
    """Enqueue task `task` with `args` on `worker`'s own queue ("" for the shared one); returns the queue.

    A task sent to a worker that dies before running it is not lost: calls record the worker they
    were routed to, and the other workers' sweep sends them again to the shared queue
    (sessions/worker/liveness.py, Sweeper). Claiming a call is a compare-and-set, so a copy runs at most once.
    """
    queue = affinity.own_queue(worker) if worker else affinity.shared_queue()
    if app.conf.task_always_eager:
        # As apply_async does: run here and now (a process that is its own worker, e.g. the
        # conformance client's "Connect"). The tasks register when their module is imported,
        # which Celery's autodiscovery does only when asked.
        app.loader.import_default_modules()
        app.tasks[task].apply(args)
    else:
        app.send_task(task, args, queue=queue, countdown=countdown)
    return queue


def to_session(task: str, server: Any, user_id: int, *args: Any) -> str:
    """`task(server id, user id, *args)`, sent to the worker holding the person's session with `server`."""
    return send(task, (server.pk, user_id, *args), worker=affinity.route(server, user_id))


# -- calls: warm ones straight to the worker that holds the session ----------------------------------

# A worker running in this very process (the embedded mode's), by name: how it takes a call at once.
_local_lanes: dict[str, Callable[[str], None]] = {}
_redis: Any = None
_redis_lock = threading.Lock()


def lane_key(worker: str) -> str:
    """The Redis list a worker pops its warm calls from (beside its Celery queue, in its namespace)."""
    return f"{affinity.own_queue(worker)}.lane"


def open_local_lane(worker: str, take: Callable[[str], None]) -> None:
    _local_lanes[worker] = take


def close_local_lane(worker: str) -> None:
    _local_lanes.pop(worker, None)


def start_call(call_id: str, worker: str = "") -> None:
    """Hand a recorded call to a worker: `worker` is the one it was routed to ("" for any).

    A warm call goes straight to the worker holding its session, with no Celery task: to the worker
    in this process directly, or as one Redis message on the named worker's lane
    (sessions/worker/lane.py), which is the one round trip a Celery task's delivery takes several
    of. A cold call (no worker holds the session) goes to the shared Celery queue, as does any call
    a lane cannot take. Nothing is lost if the lane's worker dies with the message: the call is
    recorded as pending and routed, and the sweep sends it again (sessions/worker/liveness.py).
    """
    take = _local_lanes.get(worker)
    if take is not None:
        take(call_id)
        return
    if worker and not settings.EMBEDDED and not app.conf.task_always_eager:
        try:
            with _redis_client().pipeline(transaction=False) as pipe:
                # Kept no longer than a dead worker's calls take to be swept; a live one pops at once.
                pipe.lpush(lane_key(worker), call_id).expire(lane_key(worker), affinity.heartbeat_ttl() * 10)
                pipe.execute()
            return
        except Exception:  # noqa: BLE001 - the shared queue takes it instead
            log.warning("could not hand call %s to %s's lane; sending it to the shared queue", call_id, worker)
            worker = ""
    send("sessions.run_tool_call", (call_id,), worker)


def _redis_client() -> Any:
    global _redis
    if _redis is None:
        import redis

        with _redis_lock:
            if _redis is None:
                _redis = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=5)
    return _redis
