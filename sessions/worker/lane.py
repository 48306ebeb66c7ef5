"""This worker's lane: warm calls handed straight to it (sessions/queue.py, start_call), each run as
one coroutine on the pool's loop, with no Celery task between.

Celery still owns the worker (its process, its stop), the cold calls (the shared queue: whichever
worker is free opens the session), the calls the sweep sends again, and the rest of the work. The
lane is the short way for a call whose session this worker already holds:
- in the embedded mode the worker is in the portal's process, and the call is put on the pool's loop;
- in the distributed mode the web process pushes the call's id on this worker's Redis list, which
  this worker pops from its loop.
A call's record is written, pending and routed here, before it is handed over: a message lost with
a dying worker (or a restarting Redis) leaves the call to the sweep, which sends it again; claiming
is a compare-and-set, so it runs once.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from typing import Any

from django.conf import settings

from .. import queue
from ..affinity import WORKER_NAME
from . import runtime
from .tool_call import run_tool_call

log = logging.getLogger(__name__)

# The calls started from the lane, held until they end (the loop keeps only weak references to tasks).
_started: set[asyncio.Task[Any]] = set()


def open_lane() -> None:
    """Take warm calls from now on: in this process directly, and (distributed) from the Redis lane."""
    queue.open_local_lane(WORKER_NAME, take)
    if settings.EMBEDDED:
        # The one worker there is: the calls routed to nobody in particular are its too.
        queue.open_local_lane("", take)
    else:
        runtime.get_pool().submit(_listen(queue.lane_key(WORKER_NAME)))


def close_lane() -> None:
    queue.close_local_lane(WORKER_NAME)
    if settings.EMBEDDED:
        queue.close_local_lane("")


def take(call_id: str) -> None:
    """From any thread: the call starts on the pool's loop; this returns at once."""
    # In a context of its own: the caller's (a thread inside sync_to_async, say) would otherwise
    # pass on asgiref's marks, and the call's own trips to the database would refuse to start.
    runtime.get_pool().loop.call_soon_threadsafe(_start, call_id, context=contextvars.Context())


def _start(call_id: str) -> None:
    task = asyncio.ensure_future(run_tool_call(call_id))
    _started.add(task)
    task.add_done_callback(_ended)


def _ended(task: asyncio.Task[Any]) -> None:
    _started.discard(task)
    if not task.cancelled() and task.exception() is not None:
        log.error("a call from the lane failed", exc_info=task.exception())


async def _listen(key: str) -> None:
    """Pop this worker's warm calls until it stops; what is left on the list then is the sweep's."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(settings.REDIS_URL)
    try:
        while not runtime.interrupting.is_set():
            try:
                popped = await client.blpop([key], timeout=1)
            except Exception:  # noqa: BLE001 - a Redis restart: the sweep resends what it lost
                log.warning("could not read this worker's lane; trying again", exc_info=True)
                await asyncio.sleep(1)
                continue
            if popped is not None:
                _start(popped[1].decode())
    finally:
        await client.aclose()
