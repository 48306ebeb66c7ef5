"""The person behind a running call, as the server reaches them: Cancel, forms (elicitation, in
form and URL mode), sampling requests; each asked the same way (Conversation.ask) and bounded by
the server's time to answer."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer

from .. import actions, events
from ..mcp.config import ConnectionKey, ServerConfig
from ..mcp.elicitation import defaults
from ..mcp.failure import Failure
from ..mcp.pool import CallHooks, CallOutcome
from ..mcp.secrets import Scrubber
from ..models import CallStatus, ElicitationState, SamplingState, ToolCall
from . import runtime

log = logging.getLogger(__name__)


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


CANCEL = {"action": "cancel"}


async def converse(
    call_id: str,
    user_id: int,
    on_progress: Callable[[float, float | None, str | None], Awaitable[None]],
    on_log: Callable[[str, str | None, Any], Awaitable[None]],
    on_task: Callable[[dict[str, Any]], Awaitable[None]],
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

    async def ask(
        kind: str, rid: str, event: dict[str, Any], timed_out: Callable[[str], bool], unanswered: dict[str, Any]
    ) -> dict[str, Any]:
        """Show the person a form or sampling request (`event`) and wait for their answer, at most
        `seconds_to_answer`; past it, `timed_out` records the row's end (False if an answer won the
        race) and the server hears `unanswered`, while the page closes what it showed."""
        answer: asyncio.Future[dict[str, Any]] = loop.create_future()
        waiting[rid] = answer
        await events.publish(user_id, {**event, "call": call_id, kind: rid})
        try:
            return await asyncio.wait_for(answer, seconds_to_answer)
        except TimeoutError:
            if await database_sync_to_async(timed_out)(rid):
                ended = {"type": f"{kind}.ended", "call": call_id, kind: rid, "state": "timed_out"}
                await events.publish(user_id, ended)
            return dict(unanswered)  # a copy: the caller may add to it
        finally:
            waiting.pop(rid, None)

    def opening() -> None:
        # Before the row is written: a call cancelled meanwhile still closes what it opened.
        nonlocal asked
        asked = True

    def form_timed_out(eid: str) -> bool:
        return actions.do_answer_elicitation(eid, ElicitationState.TIMED_OUT)

    def sampling_timed_out(sid: str) -> bool:
        return actions.do_answer_sampling(sid, SamplingState.TIMED_OUT)

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
        opening()
        row = await database_sync_to_async(actions.do_request_elicitation)(call_id, request_id, message, schema)
        form = {"type": "elicitation.requested", "mode": "form", "message": message, "schema": schema}
        return await ask("elicitation", str(row.id), {**form, "defaults": defaults(schema)}, form_timed_out, CANCEL)

    async def on_elicit_url(message: str, url: str, elicitation_id: str, request_id: str) -> dict[str, Any]:
        if urlsplit(url).scheme not in ("http", "https"):
            # Only a web page may be offered to open (never javascript:, file: or an app's scheme).
            return {"action": "decline"}
        schema = {"url": url, "elicitationId": elicitation_id}
        opening()
        row = await database_sync_to_async(actions.do_request_elicitation)(call_id, request_id, message, schema, "url")
        page = {"type": "elicitation.requested", "mode": "url", "message": message, "url": url}
        return await ask("elicitation", str(row.id), {**page, "elicitation_id": elicitation_id}, form_timed_out, CANCEL)

    async def on_elicit_done(elicitation_id: str) -> None:
        # The server heard back from the page it sent the person to (handshake era only).
        done = {"type": "elicitation.completed", "call": call_id, "elicitation_id": elicitation_id}
        await events.publish(user_id, done)

    async def on_sample(params: dict[str, Any], request_id: str) -> dict[str, Any]:
        opening()
        row = await database_sync_to_async(actions.do_request_sampling)(call_id, request_id, params)
        request = {"type": "sampling.requested", "request": params}
        return await ask("sampling", str(row.id), request, sampling_timed_out, {"action": "decline"})

    hooks = scrubbing(
        CallHooks(
            on_progress=on_progress,
            on_elicit=on_elicit,
            on_elicit_url=on_elicit_url,
            on_elicit_done=on_elicit_done,
            on_sample=on_sample,
            on_log=on_log,
            on_task=on_task,
            # A stopping worker leaves the call's task running: the next worker follows it.
            cancel_on_stop=lambda: not runtime.interrupting.is_set(),
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
        state = ElicitationState.INTERRUPTED if runtime.interrupting.is_set() else ElicitationState.CANCELLED
        closed = await database_sync_to_async(actions.do_close_elicitations)(call_id, state) if asked else []
        for kind, rid in closed:
            await events.publish(user_id, {"type": f"{kind}.ended", "call": call_id, kind: rid, "state": str(state)})
