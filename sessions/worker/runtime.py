"""The worker process's MCP pool and its stop: one pool per process, on a loop of its own.

The pool's news (a connection's status, a changed tool list, a log line outside any call) becomes
rows and browser events here (WorkerEvents). Work a task runs on the pool goes through
`stoppable`, so a stopping worker ends it at once (interrupt_calls).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from channels.db import database_sync_to_async
from django.conf import settings

from servers import actions as server_actions
from servers.models import Membership

from .. import actions, affinity, credentials, events, live
from ..affinity import WORKER_NAME
from ..mcp.config import ConnectionKey, Negotiated, ServerConfig
from ..mcp.failure import Failure
from ..mcp.owner import Owner
from ..mcp.pool import CallOutcome, ConnectionPool, PoolEvents, PoolSettings
from ..models import CallStatus

log = logging.getLogger(__name__)
T = TypeVar("T")

_pool: ConnectionPool | None = None
_pool_lock = threading.Lock()
stopping = threading.Event()
# The worker is stopping (Ctrl+C, SIGTERM, Celery's warm shutdown): what is in flight on the pool
# ends now, calls as interrupted, and no call starts (see interrupt_calls).
interrupting = threading.Event()
# The work of tasks in flight on the pool loop, and those of it told to end (touched only on the loop).
_in_flight: set[asyncio.Task[Any]] = set()
_interrupted: set[asyncio.Task[Any]] = set()
# The calls running on the pool loop, from either door (a lane, a Celery task): a stopping worker
# waits for them to record how they ended before it closes the pool (touched only on the loop;
# sessions/worker/tool_call.py, run_tool_call).
calls: set[asyncio.Task[Any]] = set()
_threads: concurrent.futures.ThreadPoolExecutor | None = None


def current_pool() -> ConnectionPool | None:
    """The pool if this process made one (the heartbeat must not make one)."""
    return _pool


def take_pool() -> ConnectionPool | None:
    """The pool, which from now on is no longer this process's (the worker is stopping)."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    return pool


def get_pool() -> ConnectionPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ConnectionPool(
                PoolSettings(
                    max_connections=settings.MCP_POOL_MAX_CONNECTIONS,
                    idle_seconds=settings.MCP_POOL_IDLE_SECONDS,
                    local_batch=settings.MCP_SERVER_CONNECTION_BATCH_SIZE,
                    remote_batch=settings.MCP_REMOTE_SERVER_CONNECTION_BATCH_SIZE,
                    health_seconds=settings.MCP_HEALTH_CHECK_SECONDS,
                ),
                WorkerEvents(),
            )
        return _pool


async def in_thread(work: Callable[..., T], *args: Any) -> T:
    """`work(*args)` (database work of a call) on one of the worker's threads for it, awaited on the
    pool's loop: a slow statement, or a database restarting, never holds up the loop's other calls.
    Threads of their own, not Channels' one thread for synchronous code: in the embedded mode that
    thread is the web side's too."""
    global _threads
    if _threads is None:
        with _pool_lock:
            if _threads is None:
                _threads = concurrent.futures.ThreadPoolExecutor(
                    max_workers=settings.PORTAL_WORKER_THREADS, thread_name_prefix="portal-call"
                )
    return await asyncio.get_running_loop().run_in_executor(_threads, functools.partial(work, *args))


async def calls_ended(timeout: float) -> None:
    """Until every call on the loop has recorded its end (they were interrupted), at most `timeout` s."""
    running = [task for task in calls if task is not asyncio.current_task()]
    if running:
        await asyncio.wait(running, timeout=timeout)


class Interrupted(Exception):
    """The worker stopped before this work ended."""


async def stoppable(work: Coroutine[Any, Any, T]) -> T:
    """`work` (a task's, on the pool loop) where a stopping worker can end it: raises Interrupted then."""
    task = asyncio.current_task()
    assert task is not None
    if interrupting.is_set():
        work.close()
        raise Interrupted
    _in_flight.add(task)
    try:
        return await work
    except BaseException:
        # Whatever the cancellation turned into on its way out (a failed connect, say), it was the stop.
        if task in _interrupted:
            raise Interrupted from None
        raise
    finally:
        _in_flight.discard(task)
        _interrupted.discard(task)


def interrupt_calls() -> None:
    """The worker is stopping: end the work in flight on its pool now, and start no call from here on.

    A call ends as interrupted (its open forms and sampling requests with it), recorded and
    announced by the task thread that ran it; so this returns at once, and whoever stops the
    worker waits for those threads (Celery's warm shutdown; portal/embedded.py). Without it a
    stop waits for every form's timeout, five minutes by default.
    """
    interrupting.set()
    pool = _pool
    loop = pool.started_loop if pool is not None else None
    if loop is None:
        return

    def interrupt() -> None:
        for task in list(_in_flight):
            _interrupted.add(task)
            task.cancel()

    with contextlib.suppress(RuntimeError):  # a loop already closed has nothing in flight
        loop.call_soon_threadsafe(interrupt)


def interrupted_outcome(started: float) -> CallOutcome:
    duration_ms = round((time.monotonic() - started) * 1000, 3)
    failure = Failure("interrupted", actions.INTERRUPTED_REASON)
    return CallOutcome(CallStatus.INTERRUPTED, failure=failure, duration_ms=duration_ms)


def owner_user_ids(owner: str) -> list[int]:
    """The people who see a connection: its user, or every member of the team sharing it."""
    owner = Owner(owner)
    if owner.user_id is not None:
        return [owner.user_id]
    return list(Membership.objects.filter(team_id=owner.team_id).values_list("user_id", flat=True))


class WorkerEvents(PoolEvents):
    """The pool's news, turned into rows and browser events.

    Called on the pool loop. The routing entry is written at once (the next call must find it);
    rows and browser events go through an ordered queue drained by one task, so a slow database
    or channel layer never holds up a connection or a call. The task runs only while there is
    something to write and then ends: no coroutine waits on an empty queue between events, to be
    left suspended there when the process exits (closed by the garbage collector at the
    interpreter's exit, one parked in asyncio.Queue.get crashed it).
    """

    def __init__(self) -> None:
        self._jobs: collections.deque[Callable[[], Awaitable[None]]] = collections.deque()
        self._drainer: asyncio.Task[None] | None = None
        self._log_budgets: dict[ConnectionKey, EventBudget] = {}

    def _later(self, job: Callable[[], Awaitable[None]]) -> None:
        self._jobs.append(job)
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.get_running_loop().create_task(self._drain())

    async def settled(self) -> None:
        """Until every row and event queued so far is written and sent (a test's sync point)."""
        while self._drainer is not None and not self._drainer.done():
            await asyncio.shield(self._drainer)

    async def aclose(self) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.settled(), 5.0)
        if self._drainer is not None:
            self._drainer.cancel()

    async def _drain(self) -> None:
        # Checked and ended without an await in between: a job added after the last check starts a new drainer.
        while self._jobs:
            job = self._jobs.popleft()
            try:
                await job()
            except Exception:  # noqa: BLE001 - bookkeeping must never stop the queue
                log.warning("could not record a connection event", exc_info=True)

    async def status(self, key: ConnectionKey, config: ServerConfig, status: str, failure: Failure | None) -> None:
        try:
            if status == "connected":
                affinity.record([key])
            elif status in ("closed", "failed", "needs-auth"):
                affinity.forget(key)
        except Exception:  # noqa: BLE001 - a cache outage costs affinity, not the call
            log.warning("could not update the routing of %s", key, exc_info=True)

        if failure is not None:
            # The connection's own scrubber: a URL or a server's stderr may carry what it was given.
            failure = credentials.scrubber_of(config)(failure)

        async def record() -> None:
            event = await database_sync_to_async(actions.do_set_connection_status)(
                key.server_id, key.owner, status, failure, WORKER_NAME
            )
            if event is not None:
                for user_id in await database_sync_to_async(owner_user_ids)(key.owner):
                    await events.publish(user_id, event)

        self._later(record)

    async def tools_changed(self, key: ConnectionKey, config: ServerConfig) -> None:
        async def tell() -> None:
            # Open playgrounds and server pages list the tools again when they hear this.
            for user_id in await database_sync_to_async(owner_user_ids)(key.owner):
                await events.publish(user_id, {"type": "tools.changed", "server": key.server_id})

        self._later(tell)

    async def server_log(
        self, key: ConnectionKey, config: ServerConfig, level: str, logger: str | None, data: Any
    ) -> None:
        # Thinned like a call's log (EventBudget); the connection's scrubber, as for its failures.
        budget = self._log_budgets.setdefault(key, EventBudget())
        if not budget.take():
            return
        line = live.server_log_line(level, logger, credentials.scrubber_of(config)(data))

        async def tell() -> None:
            await database_sync_to_async(live.remember_server_log)(key.server_id, key.owner, line)
            for user_id in await database_sync_to_async(owner_user_ids)(key.owner):
                await events.publish(user_id, {"type": "server.log", "server": key.server_id, **line})

        self._later(tell)

    async def negotiated(self, key: ConnectionKey, config: ServerConfig, negotiated: Negotiated) -> None:
        async def remember() -> None:
            await database_sync_to_async(server_actions.do_record_negotiated)(key.server_id, negotiated.as_dict())

        self._later(remember)


def publish(user_id: int, event: dict[str, Any]) -> None:
    get_pool().run(events.publish(user_id, event), timeout=10)


class EventBudget:
    """How many progress (or log) events of one call go to the page: a burst of 20, then 20 a second.

    A server that floods progress or log messages would otherwise fill the page's channel (1,000
    messages), and the channel layer drops what does not fit: the call's `call.ended` with it. The
    final progress step (progress = total) always goes; the record keeps its own sample of progress
    (MAX_RECORDED_PROGRESS); a log line that goes says how many were skipped before it.
    """

    burst = 20.0
    per_second = 20.0

    def __init__(self) -> None:
        self.tokens = self.burst
        self.at = time.monotonic()

    def take(self, final: bool = False) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.per_second)
        self.at = now
        if self.tokens >= 1 or final:
            self.tokens = max(0.0, self.tokens - 1)
            return True
        return False
