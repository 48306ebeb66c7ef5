"""One tool call, from its claim to its recorded end (a task's thread waits on the pool's loop).

The live tool list is checked against the call (the permission on the live definition, the schema),
the conversation runs the call (sessions/worker/conversation.py), and the outcome is cut to size,
scrubbed and written. Once claimed, a call has only its worker to end it (the sweep ends the calls
of dead workers only), so each database step after the claim waits out a restart of the database
(`_durably`), and anything else that breaks ends the call with what broke.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from channels.layers import get_channel_layer
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, close_old_connections

from servers import actions as server_actions
from servers.models import Server, ServerUnusable, check_usable

from .. import actions, credentials, events, live
from ..affinity import WORKER_NAME
from ..mcp.config import ConnectionKey
from ..mcp.failure import ConnectionFailed, Failure
from ..mcp.naming import task_support
from ..mcp.pool import CallOutcome
from ..mcp.schema import validate_arguments
from ..mcp.secrets import Scrubber
from ..mcp.truncation import describe as describe_truncation
from ..mcp.truncation import truncate_result
from ..models import CallStatus, ToolCall
from . import conversation, runtime

log = logging.getLogger(__name__)

MAX_RECORDED_PROGRESS = 200
T = TypeVar("T")


def execute_tool_call(call_id: str) -> None:
    """Celery's door to a call (a cold one, from the shared queue; one the sweep sends again): the
    same coroutine as a warm call's lane (sessions/worker/lane.py), on the pool's loop, this task's
    thread waiting for it (so Celery's warm shutdown waits for it too)."""
    if runtime.interrupting.is_set():
        # Checked here too: a stopping worker may have given its pool up, and must not make another.
        log.info("not starting call %s: this worker is stopping", call_id)
        return
    runtime.get_pool().run(run_tool_call(call_id))


async def run_tool_call(call_id: str) -> None:
    """Run one recorded call to its end, the whole of it one coroutine on the pool's loop: the
    database work in three trips to a thread (the claim with the call's row and credentials; the
    check on the live definition; the end), everything else here, with no other thread between.
    Whatever happens, the record ends with a status, unless the call now waits for a person: then
    their answer, or its timeout, ends it."""
    if runtime.interrupting.is_set():
        # Left pending: the sweep of a worker still running (or of this one, started again) sends it again.
        log.info("not starting call %s: this worker is stopping", call_id)
        return
    task = asyncio.current_task()
    runtime.calls.add(task)  # type: ignore[arg-type]
    try:
        await _run(call_id)
    finally:
        runtime.calls.discard(task)  # type: ignore[arg-type]


async def _run(call_id: str) -> None:
    # The channel the call will listen on is named now, so claiming records it in the same write.
    channel = await get_channel_layer().new_channel()
    claimed = await runtime.in_thread(_claim, call_id, channel)
    if claimed is None:
        return
    call, prepared = claimed
    progress: list[dict[str, Any]] = []  # kept on the record, for the history page
    outcome: CallOutcome | None = None
    try:
        if isinstance(prepared, CallOutcome):
            outcome = prepared  # refused before anything was asked of the server
        else:
            outcome = await _call_prepared(call, prepared, progress)
            if outcome is None:
                return
        broke = None
    except Exception as exc:  # noqa: BLE001 - the record must end, whatever broke
        log.exception("tool call %s failed inside the worker", call_id)
        broke = exc
    finished = await runtime.in_thread(_end, call_id, call, prepared, outcome, progress, broke)
    await events.publish(call.user_id, {"type": "call.ended", **finished.as_event()})


def _claim(call_id: str, channel: str) -> tuple[ToolCall, credentials.Prepared | CallOutcome] | None:
    """Pending → running (once: a task delivered twice must not call the tool twice), the call's row
    with its server, and what its connection needs; or the outcome that refuses it unasked."""
    close_old_connections()  # what a request does for a view: drop a broken or too old connection
    if not actions.do_claim_tool_call(call_id, WORKER_NAME, channel):
        return None
    call = _durably(call_id, "read", lambda: _CLAIMED.get(pk=call_id))
    try:
        # Through a restart of the database, as the claim and the end are; anything else that
        # breaks here ends the call with what broke (nothing else ends a claimed call while this
        # worker lives: the sweep ends only the calls of workers that died).
        return call, _durably(call_id, "prepare", lambda: _prepare(call))
    except Exception as exc:  # noqa: BLE001 - the record must end, whatever broke
        log.exception("tool call %s could not be prepared", call_id)
        return call, CallOutcome(CallStatus.FAILED, failure=_broke(exc))


def _prepare(call: ToolCall) -> credentials.Prepared | CallOutcome:
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
        return credentials.settle(
            server, call.user_id, prepared, CallOutcome(CallStatus.FAILED, failure=prepared.failure)
        )
    return prepared


def _end(
    call_id: str,
    call: ToolCall,
    prepared: credentials.Prepared | CallOutcome,
    outcome: CallOutcome | None,
    progress: list[dict[str, Any]],
    broke: Exception | None,
) -> ToolCall:
    """The outcome scrubbed (secrets the server echoed are redacted, a server asking for
    authorization is remembered), cut to size, and recorded with its audit row."""
    ending: dict[str, Any]
    try:
        if broke is not None:
            raise broke
        assert outcome is not None
        if isinstance(prepared, credentials.Prepared):
            outcome = credentials.settle(call.server, call.user_id, prepared, outcome)
        result, full_output = _truncated(outcome)
        ending = {
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
        if exc is not broke:
            log.exception("tool call %s failed inside the worker", call_id)
        failure = _broke(exc)
        ending = {"status": CallStatus.FAILED, "error": failure.message, "error_kind": failure.kind}
    return _finish_durably(call_id, call, ending)


def _broke(exc: Exception) -> Failure:
    return Failure("internal", f"The worker failed: {type(exc).__name__}: {exc}")


FINISH_ATTEMPTS = 30


def _pause_for_restart(call_id: str, attempt: int, doing: str) -> None:
    """Between attempts through a database that may be restarting: its restart cut this thread's
    connection, and the next statement on it would fail too, so it is dropped; a second's wait."""
    log.warning("could not %s call %s (attempt %d); trying again", doing, call_id, attempt)
    close_old_connections()
    time.sleep(1.0)


# The call just claimed, with what deciding and connecting read. The server's recorded tool list
# is left out: the live one is listed (see _record_tools).
_CLAIMED = ToolCall.objects.select_related("server__team__policy", "server__oauth", "user").defer("server__tools")


def _durably(call_id: str, doing: str, step: Callable[[], T]) -> T:
    """A step of a call this worker has claimed, through a database that may be restarting: once
    claimed, nothing else ends it while this worker lives, so giving up at the first cut connection
    would leave it running."""
    for attempt in range(1, FINISH_ATTEMPTS + 1):
        try:
            return step()
        except (OperationalError, InterfaceError):
            if attempt == FINISH_ATTEMPTS:
                raise
            _pause_for_restart(call_id, attempt, doing)
    raise AssertionError("unreachable")  # pragma: no cover


def _finish_durably(call_id: str, call: ToolCall, ending: dict[str, Any]) -> ToolCall:
    """Record how the call ended, through a database that may be restarting.

    A restart of PostgreSQL cuts this thread's connection: the write fails, and so would the
    next one on the same connection. So the broken connection is dropped and the write tried
    again, about once a second for half a minute, with the call's real outcome (not a failure
    of the bookkeeping), so a restart between a call's end and its record loses nothing.
    A write the database refuses for what it holds is recorded as a failure that says why.
    """
    ending = {**ending, "result": _storable(ending.get("result")), "error": _storable(ending.get("error", ""))}

    def write(ending: dict[str, Any]) -> ToolCall:
        return _durably(call_id, "record the end of", lambda: actions.do_finish_tool_call(call_id, call=call, **ending))

    try:
        return write(ending)
    except (OperationalError, InterfaceError):
        raise  # the database stayed away for the whole half minute
    except DatabaseError as exc:
        log.exception("the database refused the end of call %s", call_id)
        close_old_connections()
        return write(
            {
                "status": CallStatus.FAILED,
                "error": f"The call ended ({ending['status']}) but its outcome could not be stored: {type(exc).__name__}.",
                "error_kind": "unstorable",
            }
        )


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


async def _call_prepared(
    call: ToolCall, prepared: credentials.Prepared, progress: list[dict[str, Any]]
) -> CallOutcome | None:
    """List the live tools, check the permission on the live definition, then call.

    Returns None when the call was handed to a person for approval instead.
    """
    pool = runtime.get_pool()
    server = call.server
    assert server is not None
    config, key = prepared.config, prepared.key
    call_id, user_id = str(call.id), call.user_id
    backstop = Backstop(config.connect_timeout + config.request_timeout + 30)

    started = time.monotonic()
    progress_budget, log_budget = runtime.EventBudget(), runtime.EventBudget()
    skipped_logs = 0

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if len(progress) < MAX_RECORDED_PROGRESS:
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

    async def on_task(state: dict[str, Any]) -> None:
        backstop.reaches_task()
        call.task = state  # what the hand-back of a stopping worker reads (`_converse`)
        await runtime.in_thread(actions.do_record_task, call_id, state)
        await events.publish(user_id, {"type": "call.task", "call": call_id, "task": state})

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

    call_tool = pool.call_tool
    if call.task_running:
        # Its worker stopped while the server ran the call's task: follow that task, decided and
        # checked when it began; the tool is not called again.
        await events.publish(user_id, {"type": "call.started", "call": call_id, "worker": WORKER_NAME})
        call_tool = functools.partial(pool.call_tool, resume=call.task)
        return await _converse(call, prepared, call_tool, on_progress, on_log, on_task, started, backstop)
    try:
        # A task of its own, as every piece a stopping worker may end (runtime.stoppable).
        tools = await asyncio.wait_for(asyncio.ensure_future(runtime.stoppable(listed())), backstop.seconds)
    except runtime.Interrupted:
        return runtime.interrupted_outcome(started)
    except ConnectionFailed as exc:
        return CallOutcome(CallStatus.FAILED, failure=exc.failure)
    except TimeoutError:
        failure = Failure("timeout", f"the worker gave up after {backstop.seconds:g} s")
        return CallOutcome(CallStatus.TIMED_OUT, failure=failure)
    record = functools.partial(_record_tools, server, key, tools, prepared.scrub)
    tools = _recorded(key, tools) or await runtime.in_thread(_durably, call_id, "record the tools for", record)
    tool = next((t for t in tools if t.get("name") == call.tool), None)
    if tool is None:
        return CallOutcome(
            CallStatus.REJECTED, failure=Failure("unknown_tool", f"{server.name} has no tool named {call.tool!r}.")
        )
    errors = validate_arguments(tool.get("inputSchema"), call.arguments)
    if errors:
        failure = Failure("invalid_arguments", "The arguments do not match the tool's schema.")
        return CallOutcome(CallStatus.REJECTED, failure=failure, errors=errors)
    check = functools.partial(actions.do_check_tool_call, call, tool)
    gate = await runtime.in_thread(_durably, call_id, "check", check)
    call.decision = gate.decision
    if gate.waiting:
        return None
    if not gate.run:
        return CallOutcome(CallStatus.REJECTED, failure=Failure(gate.kind, gate.reason))
    support = task_support(tool)
    if support == "required" or (support == "optional" and call.as_task):
        call_tool = functools.partial(pool.call_tool, as_task=True)
    return await _converse(call, prepared, call_tool, on_progress, on_log, on_task, started, backstop)


class Backstop:
    """The worker's last bound on a call, past every timeout of its own; pushed back to the portal's
    cap on a task (PORTAL_TASK_MAX_SECONDS) once the call becomes one: a task runs as long as its
    server keeps it."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self._timeout: asyncio.Timeout | None = None

    def reaches_task(self) -> None:
        self.seconds = settings.PORTAL_TASK_MAX_SECONDS
        if self._timeout is not None:
            self._timeout.reschedule(asyncio.get_running_loop().time() + self.seconds)

    async def run(self, work: Any) -> Any:
        async with asyncio.timeout(self.seconds) as self._timeout:
            return await work


async def _converse(
    call: ToolCall,
    prepared: credentials.Prepared,
    call_tool: Any,
    on_progress: Any,
    on_log: Any,
    on_task: Any,
    started: float,
    backstop: Backstop,
) -> CallOutcome | None:
    """The call's conversation with the server and the person (sessions/worker/conversation.py),
    bounded by the backstop and ended by a stopping worker; a stopped worker's task is handed back."""
    server = call.server
    assert server is not None
    # A pending elicitation stops the request clock (a person is answering), so the backstop leaves
    # room for a few forms, each bounded by its own timeout.
    backstop.seconds += 3 * server.seconds_to_answer
    talk = conversation.converse(
        str(call.id),
        call.user_id,
        on_progress,
        on_log,
        on_task,
        prepared.scrub,
        call_tool,
        prepared.key,
        prepared.config,
        call,
        server.seconds_to_answer,
    )
    try:
        return await backstop.run(asyncio.ensure_future(runtime.stoppable(talk)))
    except runtime.Interrupted:
        if call.task_running and await runtime.in_thread(actions.do_hand_back_task_call, str(call.id), WORKER_NAME):
            # The server still runs the task: the next worker follows it (the sweep sends it again).
            log.info("handed back call %s: its task runs on", call.id)
            return None
        return runtime.interrupted_outcome(started)
    except TimeoutError:
        failure = Failure("timeout", f"the worker gave up after {backstop.seconds:g} s")
        return CallOutcome(CallStatus.TIMED_OUT, failure=failure)


# The tool list this worker last saw recorded, per connection: the list as listed and as shown. A warm
# connection hands back the very list object it listed (sessions/mcp/pool.py), so an unchanged list
# is known without scrubbing it, or reading and comparing the stored one, on every call.
_recorded_tools: dict[ConnectionKey, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}


def _recorded(key: ConnectionKey, tools: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The list as shown, if this very list was recorded already (no database work: most calls)."""
    seen = _recorded_tools.get(key)
    return seen[1] if seen is not None and seen[0] is tools else None


def _record_tools(
    server: Server, key: ConnectionKey, tools: list[dict[str, Any]], scrub: Scrubber
) -> list[dict[str, Any]]:
    """The pages and the next call's first decision read the server's stored list; keep it current.

    Returns the list as it may be shown: scrubbed of this connection's secrets and, when it is
    stored anew, of every credential of the team's (`_team_tools`).
    """
    seen = _recorded(key, tools)
    if seen is not None:
        return seen
    shown = team_tools(server, scrub(tools))
    if len(_recorded_tools) > 10_000:
        _recorded_tools.clear()
    _recorded_tools[key] = (tools, shown)
    return shown


def team_tools(server: Server, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Store a tool list for the whole team to see, scrubbed of every member's and the team's
    credentials on the server (decrypted only when the list changed); returns what was stored."""
    if tools == server.tools:  # a deferred field: read now, only when a connection listed anew
        return tools
    shown = credentials.team_scrubber(server.pk)(tools)
    if shown != server.tools:
        server_actions.do_record_tools(server.pk, shown)
    server.tools = shown
    return shown
