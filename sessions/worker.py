"""What a worker process does with the MCP pool: the Django side of running calls.

Celery tasks (tasks.py) are one line each and land here. This module loads rows,
builds a plain `ServerConfig`, runs the MCP package's coroutines on the process's
pool loop, records outcomes through actions, and publishes events to the user's
channel-layer group, from the pool loop so they stay in order.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections
from django.utils import timezone

from servers import actions as server_actions
from servers.models import Membership, Server, ServerUnusable, check_usable, usable_server
from servers.permissions import describe_tools

from . import actions, affinity, credentials, events, live, queue
from .affinity import HEARTBEAT_KEY, WORKER_NAME
from .mcp.config import ConnectionKey, Negotiated, ServerConfig
from .mcp.elicitation import defaults
from .mcp.errors import ConnectionFailed, Failure
from .mcp.naming import NEEDS_TASKS_MESSAGE, needs_tasks
from .mcp.pool import CallHooks, CallOutcome, ConnectionPool, PoolEvents, PoolSettings
from .mcp.schema import validate_arguments
from .mcp.secrets import Scrubber
from .mcp.truncation import describe as describe_truncation
from .mcp.truncation import truncate_result
from .models import Approval, ApprovalState, CallStatus, ConnectionStatus, ElicitationState, SamplingState, ToolCall

log = logging.getLogger(__name__)
T = TypeVar("T")

_pool: ConnectionPool | None = None
_pool_lock = threading.Lock()
_stopping = threading.Event()
# The worker is stopping (Ctrl+C, SIGTERM, Celery's warm shutdown): what is in flight on the pool
# ends now, calls as interrupted, and no call starts (see interrupt_calls).
_interrupting = threading.Event()
# The work of tasks in flight on the pool loop, and those of it told to end (touched only on the loop).
_in_flight: set[asyncio.Task[Any]] = set()
_interrupted: set[asyncio.Task[Any]] = set()
_heartbeat: threading.Thread | None = None


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


class Interrupted(Exception):
    """The worker stopped before this work ended."""


async def _stoppable(work: Coroutine[Any, Any, T]) -> T:
    """`work` (a task's, on the pool loop) where a stopping worker can end it: raises Interrupted then."""
    task = asyncio.current_task()
    assert task is not None
    if _interrupting.is_set():
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
    _interrupting.set()
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


def _interrupted_outcome(started: float) -> CallOutcome:
    duration_ms = round((time.monotonic() - started) * 1000, 3)
    failure = Failure("interrupted", actions.INTERRUPTED_REASON)
    return CallOutcome(CallStatus.INTERRUPTED, failure=failure, duration_ms=duration_ms)


def shutdown_pool() -> None:
    global _pool
    interrupt_calls()  # in case the worker's stop did not say so first
    _stopping.set()  # no more heartbeats: the router must stop sending calls here
    heartbeat = _heartbeat
    if heartbeat is not None and heartbeat is not threading.current_thread():
        # A beat under way ends first: it would otherwise write the heartbeat again after it is
        # cleared below, or still be in a database call while the interpreter exits.
        heartbeat.join(timeout=10)
    try:
        affinity.stop()
    except Exception:  # noqa: BLE001 - the cache may be gone already; the TTL covers it
        log.debug("could not clear the heartbeat", exc_info=True)
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown()
    try:
        # Closing each connection cleared its status already, unless its record was lost in the rush:
        # nothing of this worker may show "connected" once it is gone.
        actions.do_clear_connection_statuses(WORKER_NAME)
    except DatabaseError as exc:
        log.warning("could not clear the connection statuses of %s: %s", WORKER_NAME, exc)


def owner_user_ids(owner: str) -> list[int]:
    """The people who see a connection: its user, or every member of the team sharing it."""
    kind, _, ident = owner.partition(":")
    if kind == "user":
        return [int(ident)]
    return list(Membership.objects.filter(team_id=int(ident)).values_list("user_id", flat=True))


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


# -- tool calls ------------------------------------------------------------------------


def execute_tool_call(call_id: str) -> None:
    """Run one recorded call to its end. Whatever happens, the record ends with a status,
    unless the call now waits for a person: then their answer, or its timeout, ends it."""
    if _interrupting.is_set():
        # Left pending: the sweep of a worker still running (or of this one, started again) sends it again.
        log.info("not starting call %s: this worker is stopping", call_id)
        return
    # The channel the call will listen on is named now, so claiming records it in the same write.
    channel = get_pool().run(get_channel_layer().new_channel(), timeout=10)
    if not actions.do_claim_tool_call(call_id, WORKER_NAME, channel):
        return
    # The server's recorded tool list is left out: the live one is listed below (see _record_tools).
    found = ToolCall.objects.select_related("server__team__policy", "server__oauth", "user").defer("server__tools")
    call = found.get(pk=call_id)
    progress: list[dict[str, Any]] = []  # kept on the record, for the history page
    try:
        outcome = _run_call(call, progress)
        if outcome is None:
            return
        result, full_output = _truncated(outcome)
        ending: dict[str, Any] = {
            "status": outcome.status,
            "result": result,
            "full_output": full_output,
            "error": outcome.failure.message if outcome.failure else "",
            "error_kind": outcome.failure.kind if outcome.failure else "",
            "details": {**_details(outcome), **({"progress": progress} if progress else {})},
            "duration_ms": outcome.duration_ms,
            "decision": call.decision,
            "worker": WORKER_NAME,
        }
    except Exception as exc:  # noqa: BLE001 - the record must end, whatever broke
        log.exception("tool call %s failed inside the worker", call_id)
        ending = {
            "status": CallStatus.FAILED,
            "error": f"The worker failed: {type(exc).__name__}: {exc}",
            "error_kind": "internal",
        }
    finished = _finish_durably(call_id, call, ending)
    publish(call.user_id, {"type": "call.ended", **finished.as_event()})


FINISH_ATTEMPTS = 30


def _finish_durably(call_id: str, call: ToolCall, ending: dict[str, Any]) -> ToolCall:
    """Record how the call ended, through a database that may be restarting.

    A restart of PostgreSQL cuts this thread's connection: the write fails, and so would the
    next one on the same connection. So the broken connection is dropped and the write tried
    again, about once a second for half a minute, with the call's real outcome (not a failure
    of the bookkeeping), so a restart between a call's end and its record loses nothing.
    A write the database refuses for what it holds is recorded as a failure that says why.
    """
    ending = {**ending, "result": _storable(ending.get("result")), "error": _storable(ending.get("error", ""))}
    for attempt in range(1, FINISH_ATTEMPTS + 1):
        try:
            return actions.do_finish_tool_call(call_id, call=call, **ending)
        except (OperationalError, InterfaceError):
            if attempt == FINISH_ATTEMPTS:
                raise
            log.warning("could not record the end of call %s (attempt %d); trying again", call_id, attempt)
            close_old_connections()
            time.sleep(1.0)
        except DatabaseError as exc:
            if ending.get("error_kind") == "unstorable":
                raise
            log.exception("the database refused the end of call %s", call_id)
            close_old_connections()
            ending = {
                "status": CallStatus.FAILED,
                "error": f"The call ended ({ending['status']}) but its outcome could not be stored: {type(exc).__name__}.",
                "error_kind": "unstorable",
            }
    raise AssertionError("unreachable")  # pragma: no cover


def _truncated(outcome: CallOutcome) -> tuple[dict[str, Any] | None, bytes | None]:
    """The result as recorded and shown, cut as Claude Code cuts it; and the whole output, size-capped,
    for the owner to download when anything was cut."""
    if outcome.result is None:
        return None, None
    started = time.perf_counter()
    cut = truncate_result(outcome.result, settings.MCP_MAX_OUTPUT_TOKENS)
    if not cut.truncated:
        return outcome.result, None
    full = json.dumps(outcome.result).encode()
    limit = settings.MCP_FULL_OUTPUT_MAX_BYTES
    if len(full) > limit and outcome.result.get("structuredContent") is not None:
        # Tools often repeat their text as structured content: the content alone may fit whole.
        full = json.dumps({**outcome.result, "structuredContent": None}).encode()
    kept = min(len(full), limit)
    tokens = settings.MCP_MAX_OUTPUT_TOKENS
    outcome.truncated = {
        "tokens": cut.tokens,
        "limit": tokens,
        "full_bytes": len(full),
        "kept_bytes": kept,
        "notice": describe_truncation(cut.tokens, tokens, len(full), kept),
    }
    # What cutting and keeping the whole output cost the worker (docs/performance.md, large output).
    outcome.truncated["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return cut.result, full[:limit]


def _storable(value: Any) -> Any:
    """PostgreSQL keeps no U+0000 in text or JSON: a server's NUL becomes U+FFFD (the replacement character)."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_storable(item) for item in value]
    return value


def _details(outcome: CallOutcome) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if outcome.truncated:
        details["truncated"] = outcome.truncated
    if outcome.failure is not None:
        if outcome.failure.elicitations:
            details["elicitations"] = outcome.failure.elicitations
        if outcome.failure.stderr_tail:
            details["stderr_tail"] = outcome.failure.stderr_tail
        if outcome.failure.status_code is not None:
            details["status_code"] = outcome.failure.status_code
    if outcome.errors:
        details["errors"] = outcome.errors
    if outcome.retried:
        details["retried"] = "the session had expired; the call ran again on a new one"
    if outcome.exchange:
        details["exchange"] = outcome.exchange
    return details


MAX_RECORDED_PROGRESS = 200


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


def _run_call(call: ToolCall, progress: list[dict[str, Any]] | None = None) -> CallOutcome | None:
    """List the live tools, check the permission on the live definition, then call.

    Returns None when the call was handed to a person for approval instead.
    """
    if not call.decision:
        # Only do_start_tool_call records a decision: anything else that queued a call is refused.
        reason = "The call has no permission decision: it did not come through the portal's check."
        return CallOutcome(CallStatus.REJECTED, failure=Failure("unchecked", reason))
    try:
        server = check_usable(call.server)
    except ServerUnusable as exc:
        return CallOutcome(CallStatus.REJECTED, failure=Failure(exc.kind, exc.message))
    prepared = credentials.prepare(server, call.user_id)
    if prepared.failure is not None:
        outcome: CallOutcome | None = CallOutcome(CallStatus.FAILED, failure=prepared.failure)
    else:
        outcome = _call_prepared(call, server, prepared, progress)
    # Secrets the server echoed are redacted, and a server asking for authorization is remembered.
    return None if outcome is None else credentials.settle(server, call.user_id, prepared, outcome)


def _call_prepared(
    call: ToolCall, server: Server, prepared: credentials.Prepared, progress: list[dict[str, Any]] | None
) -> CallOutcome | None:
    pool = get_pool()
    config, key = prepared.config, prepared.key
    call_id, user_id = str(call.id), call.user_id
    backstop = config.connect_timeout + config.request_timeout + 30

    started = time.monotonic()
    progress_budget, log_budget = EventBudget(), EventBudget()
    skipped_logs = 0

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if progress is not None and len(progress) < MAX_RECORDED_PROGRESS:
            at_ms = round((time.monotonic() - started) * 1000, 1)
            progress.append({"progress": value, "total": total, "message": message, "at_ms": at_ms})
        if not progress_budget.take(final=total is not None and value >= total):
            return
        live.remember_progress(call_id, value, total, message)  # for a page that opens later
        await events.publish(
            user_id,
            {"type": "call.progress", "call": call_id, "progress": value, "total": total, "message": message},
        )

    async def on_log(level: str, logger: str | None, data: Any) -> None:
        nonlocal skipped_logs
        if not log_budget.take():
            skipped_logs += 1
            return
        event = {"type": "call.log", "call": call_id, "level": level, "logger": logger, "data": data}
        if skipped_logs:
            event["skipped"], skipped_logs = skipped_logs, 0
        await events.publish(user_id, event)

    async def listed() -> list[dict[str, Any]]:
        # The page hears "started" while the tool list comes (from the warm connection's memory, or listed).
        started_event = {"type": "call.started", "call": call_id, "worker": WORKER_NAME}
        # Both finish before anything else is sent, so "started" can never overtake a quick "ended".
        both = await asyncio.gather(
            events.publish(user_id, started_event), pool.list_tools(key, config), return_exceptions=True
        )
        if isinstance(both[1], BaseException):
            raise both[1]
        return both[1]

    try:
        tools = pool.run(_stoppable(listed()), timeout=backstop)
    except Interrupted:
        return _interrupted_outcome(started)
    except ConnectionFailed as exc:
        return CallOutcome(CallStatus.FAILED, failure=exc.failure)
    except concurrent.futures.TimeoutError:
        return CallOutcome(CallStatus.TIMED_OUT, failure=Failure("timeout", f"the worker gave up after {backstop:g} s"))
    tools = _record_tools(server, key, tools, prepared.scrub)
    tool = next((t for t in tools if t.get("name") == call.tool), None)
    if tool is None:
        return CallOutcome(
            CallStatus.REJECTED, failure=Failure("unknown_tool", f"{server.name} has no tool named {call.tool!r}.")
        )
    if needs_tasks(tool):
        # The server would refuse it too, in its own words: say why before asking it.
        return CallOutcome(
            CallStatus.REJECTED, failure=Failure("needs_tasks", NEEDS_TASKS_MESSAGE.format(tool=call.tool))
        )
    errors = validate_arguments(tool.get("inputSchema"), call.arguments)
    if errors:
        failure = Failure("invalid_arguments", "The arguments do not match the tool's schema.")
        return CallOutcome(CallStatus.REJECTED, failure=failure, errors=errors)
    gate = actions.do_check_tool_call(call, tool)
    call.decision = gate.decision
    if gate.waiting:
        return None
    if not gate.run:
        return CallOutcome(CallStatus.REJECTED, failure=Failure(gate.kind, gate.reason))
    # A pending elicitation stops the request clock (a person is answering), so the backstop leaves
    # room for a few forms, each bounded by its own timeout.
    backstop += 3 * server.seconds_to_answer
    future = pool.submit(
        _stoppable(
            _converse(
                call_id,
                user_id,
                on_progress,
                on_log,
                prepared.scrub,
                pool.call_tool,
                key,
                config,
                call,
                server.seconds_to_answer,
            )
        )
    )
    try:
        return future.result(timeout=backstop)
    except Interrupted:
        return _interrupted_outcome(started)
    except concurrent.futures.TimeoutError:
        future.cancel()
        return CallOutcome(CallStatus.TIMED_OUT, failure=Failure("timeout", f"the worker gave up after {backstop:g} s"))


# The tool list this worker last saw recorded, per connection: the list as listed and as shown. A warm
# connection hands back the very list object it listed (sessions/mcp/pool.py), so an unchanged list
# is known without scrubbing it, or reading and comparing the stored one, on every call.
_recorded_tools: dict[ConnectionKey, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}


def _record_tools(
    server: Server, key: ConnectionKey, tools: list[dict[str, Any]], scrub: Scrubber
) -> list[dict[str, Any]]:
    """The pages and the next call's first decision read the server's stored list; keep it current.

    Returns the list as it may be shown: scrubbed of this connection's secrets and, when it is
    stored anew, of every credential of the team's (`_team_tools`).
    """
    seen = _recorded_tools.get(key)
    if seen is not None and seen[0] is tools:
        return seen[1]
    shown = _team_tools(server, scrub(tools))
    if len(_recorded_tools) > 10_000:
        _recorded_tools.clear()
    _recorded_tools[key] = (tools, shown)
    return shown


def _team_tools(server: Server, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store a tool list for the whole team to see, scrubbed of every member's and the team's
    credentials on the server (decrypted only when the list changed); returns what was stored."""
    if tools == server.tools:  # a deferred field: read now, only when a connection listed anew
        return tools
    shown = credentials.team_scrubber(server.pk)(tools)
    if shown != server.tools:
        server_actions.do_record_tools(server.pk, shown)
    server.tools = shown
    return shown


def scrubbing(hooks: CallHooks, scrub: Scrubber) -> CallHooks:
    """The same hooks, seeing everything the server says (progress and log messages, elicitation
    messages and schemas, sampling requests) through the connection's scrubber first: what they
    record and send to the browser never carries a secret the connection used."""
    if not scrub:
        return hooks

    def through(sink: Callable[..., Awaitable[Any]] | None) -> Callable[..., Awaitable[Any]] | None:
        if sink is None:
            return None

        async def scrubbed(*args: Any) -> Any:
            return await sink(*scrub(args))

        return scrubbed

    sinks = {f.name: through(getattr(hooks, f.name)) for f in dataclasses.fields(hooks) if f.name.startswith("on_")}
    return dataclasses.replace(hooks, **sinks)


async def _converse(
    call_id: str,
    user_id: int,
    on_progress: Callable[[float, float | None, str | None], Awaitable[None]],
    on_log: Callable[[str, str | None, Any], Awaitable[None]],
    scrub: Scrubber,
    call_tool: Callable[..., Awaitable[CallOutcome]],
    key: ConnectionKey,
    config: ServerConfig,
    call: ToolCall,
    seconds_to_answer: float,
) -> CallOutcome:
    """Run the call while listening on a channel of its own for the person behind it: Cancel, and
    answers to the server's elicitations and sampling requests (docs/websocket-protocol.md).

    Every hook sees the server's words through the connection's scrubber (`scrubbing`)."""
    layer = get_channel_layer()
    channel = call.channel  # named and recorded when the call was claimed (execute_tool_call)
    waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
    loop = asyncio.get_running_loop()
    asked = False  # whether any form or sampling request was opened, so there may be one to close

    async def on_elicit(message: str, schema: dict[str, Any], request_id: str) -> dict[str, Any]:
        hooked = await database_sync_to_async(actions.do_apply_elicitation_hook)(call_id, request_id, message, schema)
        if hooked is not None:
            # A team admin's automatic answer (docs/websocket-protocol.md): nobody is asked.
            given, reply = hooked
            auto = {"type": "elicitation.auto_answered", "call": call_id, "elicitation": str(given.id)}
            await events.publish(
                user_id, {**auto, "message": message, "action": reply["action"], "hook": given.hook_id}
            )
            return reply
        nonlocal asked
        asked = True
        row = await database_sync_to_async(actions.do_request_elicitation)(call_id, request_id, message, schema)
        eid = str(row.id)
        answer: asyncio.Future[dict[str, Any]] = loop.create_future()
        waiting[eid] = answer
        request = {"type": "elicitation.requested", "call": call_id, "elicitation": eid, "mode": "form"}
        await events.publish(user_id, {**request, "message": message, "schema": schema, "defaults": defaults(schema)})
        try:
            return await asyncio.wait_for(answer, seconds_to_answer)
        except TimeoutError:
            # Nobody answered in time: the server hears "cancel" and the form closes in the browser.
            if await database_sync_to_async(actions.do_answer_elicitation)(eid, ElicitationState.TIMED_OUT):
                ended = {"type": "elicitation.ended", "call": call_id, "elicitation": eid, "state": "timed_out"}
                await events.publish(user_id, ended)
            return {"action": "cancel"}
        finally:
            waiting.pop(eid, None)

    async def on_elicit_url(message: str, url: str, elicitation_id: str, request_id: str) -> dict[str, Any]:
        if urlsplit(url).scheme not in ("http", "https"):
            # Only a web page may be offered to open (never javascript:, file: or an app's scheme).
            return {"action": "decline"}
        schema = {"url": url, "elicitationId": elicitation_id}
        nonlocal asked
        asked = True
        row = await database_sync_to_async(actions.do_request_elicitation)(call_id, request_id, message, schema, "url")
        eid = str(row.id)
        answer: asyncio.Future[dict[str, Any]] = loop.create_future()
        waiting[eid] = answer
        request = {"type": "elicitation.requested", "call": call_id, "elicitation": eid, "mode": "url"}
        await events.publish(user_id, {**request, "message": message, "url": url, "elicitation_id": elicitation_id})
        try:
            return await asyncio.wait_for(answer, seconds_to_answer)
        except TimeoutError:
            if await database_sync_to_async(actions.do_answer_elicitation)(eid, ElicitationState.TIMED_OUT):
                ended = {"type": "elicitation.ended", "call": call_id, "elicitation": eid, "state": "timed_out"}
                await events.publish(user_id, ended)
            return {"action": "cancel"}
        finally:
            waiting.pop(eid, None)

    async def on_elicit_done(elicitation_id: str) -> None:
        # The server heard back from the page it sent the person to (handshake era only).
        done = {"type": "elicitation.completed", "call": call_id, "elicitation_id": elicitation_id}
        await events.publish(user_id, done)

    async def on_sample(params: dict[str, Any], request_id: str) -> dict[str, Any]:
        nonlocal asked
        asked = True
        row = await database_sync_to_async(actions.do_request_sampling)(call_id, request_id, params)
        sid = str(row.id)
        answer: asyncio.Future[dict[str, Any]] = loop.create_future()
        waiting[sid] = answer
        await events.publish(
            user_id, {"type": "sampling.requested", "call": call_id, "sampling": sid, "request": params}
        )
        try:
            return await asyncio.wait_for(answer, seconds_to_answer)
        except TimeoutError:
            if await database_sync_to_async(actions.do_answer_sampling)(sid, SamplingState.TIMED_OUT):
                await events.publish(
                    user_id, {"type": "sampling.ended", "call": call_id, "sampling": sid, "state": "timed_out"}
                )
            return {"action": "decline"}
        finally:
            waiting.pop(sid, None)

    hooks = scrubbing(
        CallHooks(
            on_progress=on_progress,
            on_elicit=on_elicit,
            on_elicit_url=on_elicit_url,
            on_elicit_done=on_elicit_done,
            on_sample=on_sample,
            on_log=on_log,
        ),
        scrub,
    )
    started = time.monotonic()
    task = asyncio.ensure_future(call_tool(key, config, call.tool, call.arguments, hooks=hooks))
    cancelled = False

    async def listen() -> None:
        nonlocal cancelled
        while True:
            message = await layer.receive(channel)
            if message.get("type") == "call.cancel":
                cancelled = True
                task.cancel()
            elif message.get("type") == "elicitation.answer":
                answer = waiting.get(str(message.get("elicitation")))
                if answer is not None and not answer.done():
                    answer.set_result({"action": message.get("action"), "content": message.get("content")})
            elif message.get("type") == "sampling.answer":
                answer = waiting.get(str(message.get("sampling")))
                if answer is not None and not answer.done():
                    answer.set_result({k: message.get(k) for k in ("action", "text", "model")})

    listener = asyncio.ensure_future(listen())
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if not cancelled or (current is not None and current.cancelling()):
            raise
        # The SDK told the server (notifications/cancelled, or an aborted request in 2026 mode);
        # the connection stays open for the next call.
        duration_ms = round((time.monotonic() - started) * 1000, 3)
        failure = Failure("cancelled", "You cancelled the call.")
        exchange = hooks.exchange.as_list()
        return CallOutcome(CallStatus.CANCELLED, failure=failure, duration_ms=duration_ms, exchange=exchange)
    finally:
        listener.cancel()
        # A form still open when the call ends (cancelled, say): in the handshake era its callback
        # runs outside this task and would otherwise wait for its whole timeout.
        for answer in list(waiting.values()):
            if not answer.done():
                answer.set_result({"action": "cancel"})
        state = ElicitationState.INTERRUPTED if _interrupting.is_set() else ElicitationState.CANCELLED
        closed = await database_sync_to_async(actions.do_close_elicitations)(call_id, state) if asked else []
        for kind, rid in closed:
            await events.publish(user_id, {"type": f"{kind}.ended", "call": call_id, kind: rid, "state": str(state)})


# -- listing and testing -----------------------------------------------------------------


PoolWork = Callable[[ConnectionPool, ConnectionKey, ServerConfig], Coroutine[Any, Any, Any]]


def _with_credentials(server: Server, user_id: int, work: PoolWork) -> Any:
    """Run `work` on the pool as `user_id` connects to `server`: with their credentials, under the backstop.

    Returns the answer through the connection's scrubber, and raises ConnectionFailed with a
    diagnosis fit to show: secrets scrubbed, a server that asked for authorization remembered
    (sessions/credentials.py), the backstop's timeout as a failure too.
    """
    prepared = credentials.prepare(server, user_id)
    config = prepared.config
    pool = get_pool()
    backstop = config.connect_timeout + config.request_timeout + 30
    try:
        if prepared.failure is not None:
            raise ConnectionFailed(prepared.failure)
        return prepared.scrub(pool.run(_stoppable(work(pool, prepared.key, config)), timeout=backstop))
    except Interrupted:
        raise ConnectionFailed(Failure("interrupted", "the portal stopped before the server answered")) from None
    except ConnectionFailed as exc:
        raise ConnectionFailed(credentials.settle_failure(server, user_id, prepared, exc.failure)) from None
    except concurrent.futures.TimeoutError:
        raise ConnectionFailed(Failure("timeout", f"the worker gave up after {backstop:g} s")) from None


def execute_list_tools(server_id: int, user_id: int, refresh: bool) -> None:
    try:
        server = usable_server(server_id, servers=Server.objects.select_related("team__policy"))
    except ServerUnusable as exc:
        publish(user_id, {"type": "tools", "server": server_id, "error": Failure(exc.kind, exc.message).as_dict()})
        return
    try:
        tools = _with_credentials(server, user_id, lambda pool, key, config: pool.list_tools(key, config, refresh))
    except ConnectionFailed as exc:
        publish(user_id, {"type": "tools", "server": server_id, "error": exc.failure.as_dict()})
        return
    tools = _team_tools(server, tools)
    described = describe_tools(server, user_id, tools)
    publish(user_id, {"type": "tools", "server": server_id, "tools": tools, "described": described})


def execute_test_connection(server_id: int, user_id: int) -> None:
    try:
        server = usable_server(server_id)
    except ServerUnusable as exc:
        # Not recorded as the server's last test: nothing was tried.
        failure = Failure(exc.kind, exc.message).as_dict()
        publish(user_id, {"type": "connection.tested", "server": server_id, "ok": False, **failure})
        return
    try:
        # The admin tests with their own credentials, as any user would connect.
        info = _with_credentials(server, user_id, lambda pool, key, config: pool.probe(config))
    except ConnectionFailed as exc:
        result: dict[str, Any] = {"ok": False, **exc.failure.as_dict()}
    else:
        _team_tools(server, info.pop("tools"))
        negotiated = info.pop("negotiated", None)
        if negotiated and server.protocol == "auto":
            server_actions.do_record_negotiated(server_id, negotiated)
        result = {"ok": True, **info}
    # Stored for every admin of the team to read: scrubbed of every credential on the server.
    result = credentials.team_scrubber(server_id)(result)
    server_actions.do_record_test(server_id, result)
    publish(user_id, {"type": "connection.tested", "server": server_id, **result})


# -- resources, prompts, completions -----------------------------------------------------
#
# Each runs one pool request for (server, user) and publishes one event to the user's
# group: the answer, or `error` with the diagnosis. `ref` is the browser's, echoed back
# so a page can match answers to its questions.


def _on_server(
    server_id: int,
    user_id: int,
    event: dict[str, Any],
    work: PoolWork,
    ref: Any = None,
    record: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Run `work` against the server and publish `event` with its answer merged in (after `record`ing it)."""
    event = {**event, "server": server_id, "ref": ref}
    try:
        server = usable_server(server_id)
    except ServerUnusable as exc:
        publish(user_id, {**event, "error": Failure(exc.kind, exc.message).as_dict()})
        return
    try:
        data = _with_credentials(server, user_id, work)
    except ConnectionFailed as exc:
        publish(user_id, {**event, "error": exc.failure.as_dict()})
        return
    if record is not None:
        record(data)
    publish(user_id, {**event, **data})


def execute_list_resources(server_id: int, user_id: int, ref: Any = None) -> None:
    _on_server(
        server_id,
        user_id,
        {"type": "resources"},
        lambda pool, key, config: pool.list_resources(key, config),
        ref,
        record=lambda listing: server_actions.do_record_resource_counts(
            server_id, len(listing["resources"]), len(listing["templates"])
        ),
    )


def execute_read_resource(server_id: int, user_id: int, uri: str, ref: Any = None) -> None:
    _on_server(
        server_id,
        user_id,
        {"type": "resource.read", "uri": uri},
        lambda pool, key, config: pool.read_resource(key, config, uri),
        ref,
    )


def execute_list_prompts(server_id: int, user_id: int, ref: Any = None) -> None:
    _on_server(
        server_id,
        user_id,
        {"type": "prompts"},
        lambda pool, key, config: pool.list_prompts(key, config),
        ref,
        record=lambda listing: server_actions.do_record_prompt_count(server_id, len(listing["prompts"])),
    )


def execute_get_prompt(server_id: int, user_id: int, name: str, arguments: dict[str, str], ref: Any = None) -> None:
    _on_server(
        server_id,
        user_id,
        {"type": "prompt.got", "name": name},
        lambda pool, key, config: pool.get_prompt(key, config, name, arguments),
        ref,
    )


def execute_complete(
    server_id: int,
    user_id: int,
    target: dict[str, str],
    argument: str,
    value: str,
    context: dict[str, str],
    ref: Any = None,
) -> None:
    """Completion suggestions for an argument of a prompt (`{"prompt": name}`) or template (`{"template": uri}`)."""
    _on_server(
        server_id,
        user_id,
        {"type": "completion", **target, "argument": argument},
        lambda pool, key, config: pool.complete(key, config, target, argument, value, context),
        ref,
    )


def execute_subscribe_resource(server_id: int, user_id: int, uri: str, subscriber: str, ref: Any = None) -> None:
    """Subscribe `subscriber` (a browser socket's channel name) to `uri`; news goes to the user's group."""

    async def work(pool: ConnectionPool, key: ConnectionKey, config: ServerConfig) -> dict[str, Any]:
        scrub = credentials.scrubber_of(config)

        async def on_update(updated_uri: str, event: str, message: str) -> None:
            updated_uri, message = scrub((updated_uri, message))
            news = {"type": f"resource.{event}", "server": server_id, "uri": updated_uri}
            await events.publish(user_id, {**news, "message": message} if message else news)

        await pool.subscribe_resource(key, config, uri, on_update, subscriber)
        return {}

    _on_server(server_id, user_id, {"type": "resource.subscribed", "uri": uri}, work, ref)


def execute_unsubscribe_resource(server_id: int, user_id: int, uri: str, subscriber: str, ref: Any = None) -> None:
    # Letting go asks nothing of the server's row: not usable_server(), which would keep a
    # subscription made before the server was disabled or deleted for as long as its connection lives.
    pool = get_pool()
    try:
        pool.run(pool.unsubscribe_everywhere(server_id, uri, subscriber), timeout=settings.MCP_CONNECT_TIMEOUT)
    except concurrent.futures.TimeoutError:
        log.warning("server %s did not let go of %s in time; its connection keeps it until it closes", server_id, uri)
    publish(user_id, {"type": "resource.unsubscribed", "server": server_id, "uri": uri, "ref": ref})


# -- liveness ----------------------------------------------------------------------------


def start_heartbeat(name: str = WORKER_NAME) -> threading.Thread:
    """Tell /healthz and the call router this worker is alive, every few seconds, from a thread of
    its own; and keep the sessions it holds routed to it (sessions/affinity.py)."""
    interval = settings.PORTAL_WORKER_HEARTBEAT_SECONDS
    _stopping.clear()
    _interrupting.clear()  # a worker started (again) runs calls

    sweeper = Sweeper(name)

    def beat() -> None:
        while not _stopping.is_set():
            try:
                now = time.time()
                cache.set(HEARTBEAT_KEY, {"worker": name, "at": now}, timeout=affinity.heartbeat_ttl())
                affinity.beat(name)
                if _pool is not None:
                    affinity.record(_pool.keys(), name)
            except Exception:  # noqa: BLE001 - a cache outage must not kill the worker
                log.warning("worker heartbeat failed", exc_info=True)
            try:
                sweeper.sweep()
            except Exception:  # noqa: BLE001 - nor a database outage
                log.warning("the sweep for orphaned calls failed", exc_info=True)
            finally:
                close_old_connections()
            _stopping.wait(interval)

    global _heartbeat
    thread = threading.Thread(target=beat, name="portal-heartbeat", daemon=True)
    thread.start()
    _heartbeat = thread
    return thread


class Sweeper:
    """Ends calls whose worker died, and sends again calls whose task was lost (run from the heartbeat).

    A worker counts as dead once its heartbeat has been missing for a whole heartbeat TTL as this
    worker saw it, and only while this worker's own heartbeat can be read: an emptied or
    unreachable cache (a Redis restart) must not look like every worker dying at once. A call
    still pending long after it was queued (its task lost with a broker restart) is queued again;
    claiming is a compare-and-set, so a copy that was not lost after all does nothing. Approvals
    past their time whose expiry task was lost the same way are ended.
    """

    def __init__(self, name: str = WORKER_NAME) -> None:
        self.name = name
        self.missing_since: dict[str, float] = {}
        self.resent: dict[str, float] = {}

    def sweep(self, now: float | None = None) -> dict[str, int]:
        now = time.monotonic() if now is None else now
        done = {"ended": 0, "resent": 0, "expired": 0}
        if not affinity.is_alive(self.name):
            self.missing_since.clear()  # what we cannot see, we do not judge
            return done
        ttl = affinity.heartbeat_ttl()
        # Running calls name the worker running them; pending ones the worker they were routed to.
        held = ToolCall.objects.filter(status__in=[CallStatus.RUNNING, CallStatus.PENDING]).exclude(worker="")
        # order_by(): the model's ordering would put created_at into the DISTINCT, a row per call.
        workers = set(held.order_by().values_list("worker", flat=True).distinct())
        for worker in workers:
            if worker == self.name or affinity.is_alive(worker):
                self.missing_since.pop(worker, None)
                continue
            first_missed = self.missing_since.setdefault(worker, now)
            if now - first_missed < ttl:
                continue
            for call_id in held.filter(worker=worker, status=CallStatus.RUNNING).values_list("pk", flat=True):
                if actions.do_end_orphaned_call(call_id, worker) is not None:
                    done["ended"] += 1
                    log.warning("ended call %s: its worker %s stopped", call_id, worker)
            for call_id in actions.do_unroute_calls(worker):
                self._resend(str(call_id), now)
                done["resent"] += 1
                log.warning(
                    "sent call %s to the shared queue: its worker %s stopped before running it", call_id, worker
                )
        for gone in set(self.missing_since) - workers:
            del self.missing_since[gone]
        stale = timezone.now() - timedelta(seconds=settings.PORTAL_PENDING_RESEND_SECONDS)
        for call_id in ToolCall.objects.filter(status=CallStatus.PENDING, created_at__lt=stale).values_list(
            "pk", flat=True
        )[:100]:
            key = str(call_id)
            if now - self.resent.get(key, -1e9) < settings.PORTAL_PENDING_RESEND_SECONDS:
                continue
            self._resend(key, now)
            done["resent"] += 1
        if len(self.resent) > 10_000:
            self.resent.clear()
        # Approvals whose expiry task was lost (it waits in the broker for its countdown).
        overdue = Approval.objects.filter(state=ApprovalState.PENDING, expires_at__lt=timezone.now())
        for approval_id in overdue.values_list("pk", flat=True)[:100]:
            actions.do_expire_approval(str(approval_id))
            done["expired"] += 1
        return done

    def _resend(self, call_id: str, now: float) -> None:
        self.resent[call_id] = now
        queue.send("sessions.run_tool_call", (call_id,))


def forget_gone_local_workers() -> int:
    """Remove the connection statuses left by workers of this machine that no longer run (a portal
    killed outright cannot clear its own): after a restart no server shows "connected" with nothing
    open. Only for the embedded mode, where every worker is a process here (WORKER_NAME is host:pid)."""
    host = f"{WORKER_NAME.rsplit(':', 1)[0]}:"
    workers = ConnectionStatus.objects.filter(worker__startswith=host).values_list("worker", flat=True).distinct()
    gone = [name for name in workers.order_by() if not _process_runs(name.removeprefix(host))]
    return sum(actions.do_clear_connection_statuses(name) for name in gone)


def _process_runs(pid: str) -> bool:
    if not pid.isdigit():
        return True  # not a name this code made: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it runs, as someone else
    return True
