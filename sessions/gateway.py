"""What the portal's MCP endpoint answers: the person's servers, as one MCP server or one each.

The endpoint (sessions/mcp/endpoint.py) asks; this answers as the playground would, through the
same doors: a tool call is started by `actions.do_start_tool_call` (the one decision, the one
record, the one worker path) and followed by the events its worker publishes to the person
(sessions/events.py); resources, prompts and completions are asked of the worker holding the
person's session, as the playground's socket asks. The record stays the truth: a call whose events
were lost is read back from the database.

Names: on `/mcp/` every tool is `<server>__<tool>` (`endpoint_names`), so that a client that prefixes
its own `mcp__<client name>__` stays within 64 characters for a short client name (NAME_BUDGET); on
`/mcp/<server>/` a server's names are its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from servers.models import Server
from servers.permissions import decide_for, usable_servers
from servers.policy import ASK, DENY

from . import actions, events, limits, messages, queue
from .access_tokens import Agent
from .live import elicitation_event, sampling_event
from .mcp.apps import shown_to_models
from .mcp.endpoint import INVALID_PARAMS, MODERN_ERAS, NOT_FOUND, URL_ELICITATION_REQUIRED, Caller, Refused
from .mcp.naming import SEPARATOR, endpoint_names, normalize_name
from .models import (
    CallStatus,
    Elicitation,
    ElicitationState,
    SamplingRequest,
    SamplingState,
    ToolCall,
    Via,
)

log = logging.getLogger(__name__)

ASKS_NOTE = "[Asks for approval in the MCP Portal before each run] "
# How often a held or running call is read back from the database when no event came (events are
# best effort), at first; then twice as long each time, up to RECHECK_MAX_SECONDS. How often a held
# call's client hears progress: settings.PORTAL_ENDPOINT_KEEPALIVE_SECONDS.
RECHECK_SECONDS = 5.0
RECHECK_MAX_SECONDS = 30.0
# A server never listed yet is listed live for the endpoint, this long at most.
LIST_WAIT_SECONDS = 30.0


# -- whose servers, under which names ----------------------------------------------------------


@dataclass
class Named:
    server: Server
    path: str  # the server's name on the endpoint: `/mcp/<path>/`, and its tools' prefix on `/mcp/`


def server_paths(servers: list[Server]) -> list[Named]:
    """Each server's name on the endpoint: its normalized name; a person in two teams with servers
    of the same name sees the later one with a suffix from its team (stable: by ids, not order)."""
    taken: dict[str, int] = {}
    named = []
    for server in sorted(servers, key=lambda s: s.pk):
        path = normalize_name(server.name)
        if path in taken:
            path = f"{path}_{hashlib.sha256(f'{server.team_id}/{server.name}'.encode()).hexdigest()[:6]}"
        taken[path] = server.pk
        named.append(Named(server, path))
    return named


def _servers_of(agent: Agent) -> list[Named]:
    return [n for n in server_paths(usable_servers(agent.user)) if agent.may_use(n.server.pk)]


@dataclass
class Listed:
    """One tool as the endpoint lists it, and where a call to it goes."""

    name: str
    server: Server
    tool: str
    definition: dict[str, Any]


def _shown(definition: dict[str, Any], name: str, effect: str) -> dict[str, Any]:
    tool = {k: v for k, v in definition.items() if k not in ("execution",)}
    tool["name"] = name
    if effect == ASK:
        tool["description"] = ASKS_NOTE + str(definition.get("description") or "")
    return tool


def _tools_for(agent: Agent, only: str, apps: bool = False) -> list[Listed]:
    """What the person may call: denied tools are left out, tools that ask are listed (saying so).
    A tool that runs only as an MCP task is listed as a plain tool: the worker runs its task, and
    the agent's call waits for the result like any long call (docs/tasks-and-apps.md). An app-only
    tool is listed only to a client that renders apps (`apps`): it is not the model's to call."""
    listed = []
    for named in _servers_of(agent):
        if only and named.path != only:
            continue
        server = named.server
        tools = [t for t in server.tools if isinstance(t, dict) and t.get("name")]
        names = endpoint_names(named.path, [str(t["name"]) for t in tools])
        for tool in tools:
            if not apps and not shown_to_models(tool):
                continue
            decision = decide_for(server, agent.user.pk, tool["name"], tool)
            if decision.effect == DENY:
                continue
            name = tool["name"] if only else names[tool["name"]]
            listed.append(Listed(name, server, tool["name"], _shown(tool, name, decision.effect)))
    return listed


def _one_server(agent: Agent, path: str, servers: list[Named] | None = None) -> Server:
    for named in _servers_of(agent) if servers is None else servers:
        if named.path == path:
            return named.server
    raise Refused("Unknown server.", NOT_FOUND)


def _unlisted(agent: Agent, only: str) -> list[Server]:
    """The person's servers the portal has never listed: the endpoint lists them live first."""
    return [n.server for n in _servers_of(agent) if (not only or n.path == only) and n.server.tools_listed_at is None]


def _where(agent: Agent, only: str, name: str) -> tuple[Server, str]:
    """The server and tool a name on the endpoint stands for. Only the names are matched here: the
    call's decision is `do_start_tool_call`'s (a denied tool's call ends naming its rule), and a tool
    missing from the last list is the worker's to find on the live one."""
    servers = _servers_of(agent)
    if only:
        return _one_server(agent, only, servers), name
    for named in servers:
        tools = [str(t["name"]) for t in named.server.tools if isinstance(t, dict) and t.get("name")]
        for tool, listed_as in endpoint_names(named.path, tools).items():
            if listed_as == name:
                return named.server, tool
    for named in servers:
        if name.startswith(named.path + SEPARATOR):
            return named.server, name[len(named.path) + len(SEPARATOR) :]
    raise Refused(f"Unknown tool: {name}")


# -- following what the worker publishes to the person -------------------------------------------


class Inbox:
    """The person's events (sessions/events.py) as one process hears them, for one request."""

    def __init__(self, channel: str):
        self.channel = channel
        self.layer = get_channel_layer()

    async def next(self, timeout: float) -> dict[str, Any] | None:
        try:
            message = await asyncio.wait_for(self.layer.receive(self.channel), timeout)
        except TimeoutError:
            return None
        return message.get("event") if message.get("type") == "portal.event" else None


@asynccontextmanager
async def listening(user_id: int) -> AsyncIterator[Inbox]:
    layer = get_channel_layer()
    channel = await layer.new_channel("endpoint.")
    group = events.user_group(user_id)
    await layer.group_add(group, channel)
    try:
        yield Inbox(channel)
    finally:
        await asyncio.shield(layer.group_discard(group, channel))


# -- results -------------------------------------------------------------------------------------

FAILED_AS = {
    CallStatus.REJECTED: "The portal refused the call",
    CallStatus.FAILED: "The call failed",
    CallStatus.TIMED_OUT: "The call timed out",
    CallStatus.CANCELLED: "The call was cancelled",
    CallStatus.INTERRUPTED: "The call was interrupted",
}


def tool_error(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": True}


def result_of(ended: dict[str, Any], era: str = "") -> dict[str, Any]:
    """A call's end (its `call.ended` event, or its record as one) as the client's CallToolResult.

    A server's -32042 (open these pages, then call again) goes to a handshake-era client as the same
    error, with the pages; a 2026-era one, which has no such error, reads the pages in the tool error."""
    result = ended.get("result")
    status = ended.get("status")
    pages = (ended.get("details") or {}).get("elicitations") or []
    if ended.get("error_kind") == "url_elicitation_required" and pages:
        if era and era not in MODERN_ERAS:
            raise Refused(
                str(ended.get("error") or "Open these pages first."), URL_ELICITATION_REQUIRED, {"elicitations": pages}
            )
        listed = "; ".join(f"{p.get('message', '')} {p.get('url', '')}".strip() for p in pages if isinstance(p, dict))
        return tool_error(f"The server asks you to open a page first, then call again: {listed}")
    if isinstance(result, dict) and status in (CallStatus.SUCCEEDED, CallStatus.TOOL_ERROR):
        shown = {k: v for k, v in result.items() if k in ("content", "structuredContent", "isError", "_meta")}
        shown.setdefault("content", [])
        truncated = (ended.get("details") or {}).get("truncated")
        if truncated:
            note = f"{truncated.get('notice', 'The output was cut.')} The whole output is in the portal's history."
            shown["content"] = [*shown["content"], {"type": "text", "text": note}]
        return shown
    why = FAILED_AS.get(status, f"The call ended {status}")
    return tool_error(f"{why}: {ended.get('error') or 'no reason was given.'}")


STATE_PREFIX = "call:"


def _question(event: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A form or sampling request (its event) as an input request of the 2026 era, with its key."""
    if event.get("type") == "sampling.requested":
        return f"sampling:{event.get('sampling')}", {"method": "sampling/createMessage", "params": event.get("request")}
    if event.get("mode") == "url":
        # The 2026 era has no elicitation id and no completion notice: the page is offered, and that is all.
        params: dict[str, Any] = {"mode": "url", "message": event.get("message") or "", "url": event.get("url") or ""}
    else:
        params = {"mode": "form", "message": event.get("message") or "", "requestedSchema": event.get("schema") or {}}
    return f"elicitation:{event.get('elicitation')}", {"method": "elicitation/create", "params": params}


def input_required(call_id: str, questions: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """This request ends asking the client; its retry, with the answers and this state, goes on."""
    return {
        "resultType": "input_required",
        "inputRequests": dict(questions),
        "requestState": f"{STATE_PREFIX}{call_id}",
    }


async def _deliver_form(agent: Agent, eid: str, answer: dict[str, Any], strict: bool = False) -> None:
    """An answer to a form, from the client, checked and sent to the call's worker as the browser's
    answer is. The person may have answered first in the browser: then it is too late, and dropped.
    `strict`: an answer that is no answer to the form (tasks/update) is refused, not dropped."""
    action, content = answer.get("action"), answer.get("content")
    if action not in ("accept", "decline", "cancel"):
        if strict:
            raise Refused("The answer's action must be accept, decline or cancel.")
        return
    try:
        channel, call_id = await database_sync_to_async(actions.do_take_elicitation_answer)(
            agent.user, eid, action, content
        )
    except actions.AnswerError as exc:
        if strict and exc.errors:
            raise Refused(str(exc), INVALID_PARAMS, {"errors": exc.errors}) from None
        return
    message = {"type": "elicitation.answer", "elicitation": eid, "action": action, "content": content}
    await get_channel_layer().send(channel, message)
    await events.publish(agent.user.pk, {"type": "elicitation.answered", "call": call_id, "elicitation": eid})


async def _deliver_sampling(agent: Agent, sid: str, text: str, model: str) -> None:
    """The client's model's reply to a sampling request, as for forms."""
    text, model = text[: messages.MAX_SAMPLING_REPLY], model[:200]
    try:
        channel, call_id = await database_sync_to_async(actions.do_take_sampling_answer)(
            agent.user, sid, "approve", text
        )
    except actions.AnswerError:
        return
    message = {"type": "sampling.answer", "sampling": sid, "action": "approve", "text": text, "model": model}
    await get_channel_layer().send(channel, message)
    await events.publish(agent.user.pk, {"type": "sampling.answered", "call": call_id, "sampling": sid})


async def _deliver_answers(agent: Agent, answers: dict[str, dict[str, Any]], strict: bool = False) -> None:
    """Answers keyed as the 2026 era's input requests are (`_question`), each to its form or
    sampling request, as the browser's answers go."""
    for key, answer in answers.items():
        kind, _, rid = key.partition(":")
        if kind == "elicitation":
            await _deliver_form(agent, rid, answer, strict)
        elif kind == "sampling":
            content = answer.get("content")
            text = content.get("text", "") if isinstance(content, dict) else ""
            await _deliver_sampling(agent, rid, str(text), str(answer.get("model") or ""))


# -- the gateway ---------------------------------------------------------------------------------


class PortalGateway:
    """The Gateway of sessions/mcp/endpoint.py, for the person of each request."""

    # -- tools --

    async def list_tools(self, caller: Caller, live: bool = True) -> list[dict[str, Any]]:
        agent: Agent = caller.agent
        unlisted = await database_sync_to_async(_unlisted)(agent, caller.server) if live else []
        if unlisted:
            await self._list_live(agent, unlisted)
        found = await database_sync_to_async(_tools_for)(agent, caller.server, caller.apps)
        return [listed.definition for listed in found]

    async def _list_live(self, agent: Agent, servers: list[Server]) -> None:
        async with listening(agent.user.pk) as inbox:
            waiting = {server.pk for server in servers}
            for server in servers:
                await database_sync_to_async(queue.to_session)("sessions.list_tools", server, agent.user.pk, False)
            deadline = time.monotonic() + LIST_WAIT_SECONDS
            while waiting and time.monotonic() < deadline:
                event = await inbox.next(deadline - time.monotonic())
                if event is not None and event.get("type") == "tools":
                    waiting.discard(event.get("server"))

    async def call_tool(self, caller: Caller, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        agent: Agent = caller.agent
        try:
            # What the playground's socket refuses (nesting past its depth, NUL), refused alike here.
            messages.check_shape(arguments)
        except messages.MessageError as exc:
            return tool_error(f"The portal refused the call: {exc}")
        if caller.state is not None:
            try:
                await database_sync_to_async(_where)(agent, caller.server, name)
            except Refused as exc:
                return tool_error(str(exc))
            return await self._resume(caller, agent, caller.state, caller.answers or {})
        came = actions.Came(via=Via.MCP, client=caller.client, access_token=agent.token)
        async with listening(agent.user.pk) as inbox:
            try:
                # A 2026 client that declared tasks may get one: an optional task tool runs as a task too.
                call = await database_sync_to_async(_start)(agent, caller.server, name, arguments, came, caller.tasks)
            except (Refused, limits.RateLimited) as exc:
                return tool_error(str(exc))
            if call.finished:
                return result_of(call.as_event(), caller.protocol_version)
            try:
                return await self._follow(caller, agent, str(call.id), call.status, inbox)
            except asyncio.CancelledError:
                # The client cancelled (notifications/cancelled, or it went away): so does the call.
                await asyncio.shield(database_sync_to_async(_give_up)(agent, str(call.id)))
                raise

    async def _resume(
        self, caller: Caller, agent: Agent, state: str, answers: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        """The client's retry in the 2026 era, after `input_required`: its answers go to the call's
        worker as the browser's would, and the call is followed again (or asks its next question)."""
        call_id = state.removeprefix(STATE_PREFIX)
        async with listening(agent.user.pk) as inbox:
            record = await database_sync_to_async(_own_call)(agent, call_id) if state.startswith(STATE_PREFIX) else None
            if record is None:
                return tool_error("Unknown call: the request state names no call of yours.")
            await _deliver_answers(agent, answers)
            if record.finished:
                return result_of(record.as_event(), caller.protocol_version)
            open_now = await database_sync_to_async(_open_questions)(call_id, caller.rounds)
            if open_now:
                return input_required(call_id, open_now)
            try:
                return await self._follow(caller, agent, call_id, record.status, inbox)
            except asyncio.CancelledError:
                await asyncio.shield(database_sync_to_async(_give_up)(agent, call_id))
                raise

    async def _follow(
        self,
        caller: Caller,
        agent: Agent,
        call_id: str,
        status: str,
        inbox: Inbox,
        open_now: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Until the call ends: its result. `open_now`: its questions already waiting (their events
        were before this request listened), relayed first."""
        asked: list[asyncio.Future[None]] = []  # forms and sampling requests relayed to the client
        relayed: set[str] = set()
        try:
            for event in open_now or []:
                self._relay(caller, agent, event, asked, relayed)
            return await self._until_ended(caller, agent, call_id, status, inbox, asked, relayed)
        finally:
            for question in asked:
                question.cancel()  # the call ended: a question still open at the client is moot

    async def _until_ended(
        self,
        caller: Caller,
        agent: Agent,
        call_id: str,
        status: str,
        inbox: Inbox,
        asked: list[asyncio.Future[None]],
        relayed: set[str],
    ) -> dict[str, Any]:
        held = status == CallStatus.AWAITING_APPROVAL
        if held and caller.tasks:
            return await self._as_task(caller, call_id)
        keepalive = settings.PORTAL_ENDPOINT_KEEPALIVE_SECONDS
        ticks = 0
        last_keepalive = time.monotonic()
        recheck = RECHECK_SECONDS
        task_news = ""  # the call's MCP task, as its status line says it: the call may run for long
        while True:
            now = time.monotonic()
            waiting = "Waiting for your approval in the MCP Portal." if held else task_news
            if waiting and caller.wants_progress and now - last_keepalive >= keepalive and caller.progress:
                # Clients such as Claude Code reset their idle timer on progress: one while the person
                # decides, or while the server runs the call's task.
                ticks += 1
                await caller.progress(ticks, None, waiting)
                last_keepalive = now
            event = await inbox.next(min(recheck, keepalive) if waiting else recheck)
            if event is None:
                # Doubled each time nothing came: a thousand calls waiting for a busy worker would
                # otherwise read their records 200 times a second, slowing the calls they wait for.
                recheck = min(recheck * 2, RECHECK_MAX_SECONDS)
                record = await database_sync_to_async(_record)(call_id)
                if record is None:
                    return tool_error("The call's record is gone.")
                if record.finished:
                    return result_of(record.as_event(), caller.protocol_version)
                held = record.status == CallStatus.AWAITING_APPROVAL
                if caller.tasks and (held or record.task_running):
                    return await self._as_task(caller, call_id)
                continue
            if event.get("call") != call_id:
                continue
            kind = event.get("type")
            if kind == "call.ended":
                return result_of(event, caller.protocol_version)
            if kind == "approval.requested":
                held = True
                if caller.tasks:
                    return await self._as_task(caller, call_id)
            elif kind in ("call.started", "approval.ended"):
                held = False
            elif kind == "call.progress" and caller.progress:
                ticks = max(ticks, int(event.get("progress") or 0))
                await caller.progress(event.get("progress") or 0, event.get("total"), event.get("message"))
            elif kind == "call.task" and isinstance(event.get("task"), dict):
                task = event["task"]
                if caller.tasks and task.get("id"):
                    # The upstream server runs it as a task: this client may follow the portal's.
                    return await self._as_task(caller, call_id)
                task_news = f"Task {task.get('status')}: {task.get('message') or ''}".strip().rstrip(":")
                if caller.progress:
                    ticks += 1
                    await caller.progress(ticks, None, task_news)
                    last_keepalive = time.monotonic()
            elif kind == "call.log" and caller.log:
                await caller.log(str(event.get("level") or "info"), event.get("logger"), event.get("data"))
            elif kind == "elicitation.requested" and "elicitation" in caller.rounds:
                return input_required(call_id, [_question(event)])
            elif kind == "sampling.requested" and "sampling" in caller.rounds:
                return input_required(call_id, [_question(event)])
            elif kind in ("elicitation.requested", "sampling.requested"):
                self._relay(caller, agent, event, asked, relayed)
            elif kind == "elicitation.completed" and caller.elicit_done:
                await caller.elicit_done(str(event.get("elicitation_id") or ""))

    def _relay(
        self, caller: Caller, agent: Agent, event: dict[str, Any], asked: list[asyncio.Future[None]], relayed: set[str]
    ) -> None:
        """A form, page or sampling request, asked of a client that declared it can answer (the
        handshake era's requests on the call's stream), once; otherwise the browser answers."""
        kind = event.get("type")
        key = f"{kind}:{event.get('elicitation') or event.get('sampling')}"
        if key in relayed:
            return
        if kind == "elicitation.requested" and event.get("mode") == "form" and caller.elicit:
            asked.append(asyncio.ensure_future(self._relay_form(caller, agent, event)))
        elif kind == "elicitation.requested" and event.get("mode") == "url" and caller.elicit_url:
            asked.append(asyncio.ensure_future(self._relay_page(caller, agent, event)))
        elif kind == "sampling.requested" and caller.sample:
            asked.append(asyncio.ensure_future(self._relay_sampling(caller, agent, event)))
        else:
            return
        relayed.add(key)

    async def _as_task(self, caller: Caller, call_id: str) -> dict[str, Any]:
        """The 2026 answer that leaves the call running: the task the client follows with tasks/get."""
        record = await database_sync_to_async(_record)(call_id)
        if record is None:
            return tool_error("The call's record is gone.")
        return {"resultType": "task", **await database_sync_to_async(_task_of)(record, caller)}

    # -- the person's calls as MCP tasks (docs/mcp-endpoint.md, "Tasks") --

    async def start_task(self, caller: Caller, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """A task-augmented call (handshake era): started as any call, as a task where the tool
        allows one, and answered at once with its task; a call that could not even be recorded
        (an unknown tool, the rate limit) is the tool error a plain call gets."""
        agent: Agent = caller.agent
        try:
            messages.check_shape(arguments)
        except messages.MessageError as exc:
            return tool_error(f"The portal refused the call: {exc}")
        came = actions.Came(via=Via.MCP, client=caller.client, access_token=agent.token)
        try:
            call = await database_sync_to_async(_start)(agent, caller.server, name, arguments, came, True)
        except (Refused, limits.RateLimited) as exc:
            return tool_error(str(exc))
        return {"task": await database_sync_to_async(_task_of)(call, caller)}

    async def get_task(self, caller: Caller, task_id: str) -> dict[str, Any]:
        return await database_sync_to_async(_task_now)(caller, task_id)

    async def task_result(self, caller: Caller, task_id: str) -> dict[str, Any]:
        """The handshake era's tasks/result: the call's result once it ends, its questions relayed to
        the client meanwhile (as the plain call's are); a failed or cancelled call's error."""
        agent: Agent = caller.agent
        async with listening(agent.user.pk) as inbox:
            record = await database_sync_to_async(_own_task)(agent, caller.server, task_id)
            if record is None:
                raise _no_task()
            if not record.finished:
                open_now = await database_sync_to_async(_open_events)(task_id)
                # Not _give_up on a cancelled request: the task goes on without anyone waiting for it.
                followed = await self._follow(caller, agent, task_id, record.status, inbox, open_now)
                record = await database_sync_to_async(_record)(task_id)
                if record is None or not record.finished:
                    return followed
        outcome, answer = _outcome(record, caller.protocol_version)
        if outcome == "error":
            raise Refused(answer["message"], answer["code"], answer.get("data"))
        return answer

    async def cancel_task(self, caller: Caller, task_id: str) -> tuple[dict[str, Any], bool]:
        """As the client's cancel of a plain call (_give_up): a held call is withdrawn, a running one
        cancelled at its worker; waits a little for its end, so the answer can say `cancelled`."""
        agent: Agent = caller.agent
        async with listening(agent.user.pk) as inbox:
            record = await database_sync_to_async(_own_task)(agent, caller.server, task_id)
            if record is None:
                raise _no_task()
            if record.finished:
                return await database_sync_to_async(_task_of)(record, caller), False
            told = False
            deadline = time.monotonic() + CANCEL_WAIT_SECONDS
            while time.monotonic() < deadline:
                if not told:
                    # A call not yet claimed by a worker has none to tell: asked again until it has.
                    told = await database_sync_to_async(_tell_to_stop)(agent, task_id)
                await inbox.next(0.25)
                record = await database_sync_to_async(_record)(task_id)
                if record is None or record.finished:
                    break
            if record is None:
                raise _no_task()
            return await database_sync_to_async(_task_of)(record, caller), True

    async def update_task(self, caller: Caller, task_id: str, responses: dict[str, Any]) -> None:
        """2026 tasks/update: answers to the task's own open questions; any other key is ignored."""
        agent: Agent = caller.agent
        record = await database_sync_to_async(_own_task)(agent, caller.server, task_id)
        if record is None:
            raise _no_task()
        asked = dict(await database_sync_to_async(_open_questions)(task_id, ALL_QUESTIONS))
        # A key not open (answered in the browser meanwhile, or never asked) is ignored, as the spec
        # allows; an answer that breaks its form is refused (-32602), so the client can say so.
        await _deliver_answers(
            agent, {k: v for k, v in responses.items() if k in asked and isinstance(v, dict)}, strict=True
        )

    async def list_tasks(self, caller: Caller, offset: int, limit: int) -> tuple[list[dict[str, Any]], int | None]:
        return await database_sync_to_async(_task_page)(caller, offset, limit)

    async def _relay_form(self, caller: Caller, agent: Agent, event: dict[str, Any]) -> None:
        """A form of the upstream server, asked of the client (it declared elicitation); its answer
        goes the way the browser's does, checked against the schema. The person may answer first in
        the browser: then the client's answer is too late, and dropped."""
        assert caller.elicit is not None
        eid = str(event.get("elicitation"))
        try:
            answer = await caller.elicit(str(event.get("message") or ""), event.get("schema") or {})
        except Exception:  # noqa: BLE001 - a client that cannot answer leaves the form to the browser
            log.info("the client could not answer form %s; the browser may", eid, exc_info=True)
            return
        await _deliver_form(agent, eid, answer)

    async def _relay_page(self, caller: Caller, agent: Agent, event: dict[str, Any]) -> None:
        """A page the upstream server asks the person to visit (URL mode), offered by the client."""
        assert caller.elicit_url is not None
        eid = str(event.get("elicitation"))
        try:
            answer = await caller.elicit_url(
                str(event.get("message") or ""), str(event.get("url") or ""), str(event.get("elicitation_id") or "")
            )
        except Exception:  # noqa: BLE001 - as for forms: the browser may still answer
            log.info("the client could not offer page %s", eid, exc_info=True)
            return
        await _deliver_form(agent, eid, answer)

    async def _relay_sampling(self, caller: Caller, agent: Agent, event: dict[str, Any]) -> None:
        """A sampling request of the upstream server, asked of the client's model, as for forms."""
        assert caller.sample is not None
        sid = str(event.get("sampling"))
        try:
            answer = await caller.sample(event.get("request") or {})
        except Exception:  # noqa: BLE001 - as for forms: the browser may still answer
            log.info("the client could not answer sampling request %s", sid, exc_info=True)
            return
        await _deliver_sampling(agent, sid, str(answer.get("text") or ""), str(answer.get("model") or ""))

    # -- resources, prompts, completions: asked of the worker holding the person's session --

    async def _ask(self, agent: Agent, server: Server, task: str, answer: str, *args: Any) -> dict[str, Any]:
        ref = f"endpoint-{uuid.uuid4()}"
        wait = settings.MCP_CONNECT_TIMEOUT + server.request_timeout + 5
        async with listening(agent.user.pk) as inbox:
            await database_sync_to_async(queue.to_session)(task, server, agent.user.pk, *args, ref)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                event = await inbox.next(deadline - time.monotonic())
                if event is not None and event.get("type") == answer and event.get("ref") == ref:
                    if event.get("error"):
                        raise Refused(f"{server.name}: {event['error'].get('message', 'failed')}")
                    return event
        raise Refused(f"{server.name} did not answer within {wait:g} s.")

    async def _each_server(self, caller: Caller) -> list[Named]:
        named = await database_sync_to_async(_servers_of)(caller.agent)
        return [n for n in named if not caller.server or n.path == caller.server]

    async def list_resources(self, caller: Caller) -> list[dict[str, Any]]:
        found = []
        for named in await self._each_server(caller):
            listing = await self._listing(caller.agent, named.server)
            for resource in listing.get("resources") or []:
                found.append(self._prefixed(caller, named, resource))
        return found

    async def list_resource_templates(self, caller: Caller) -> list[dict[str, Any]]:
        found = []
        for named in await self._each_server(caller):
            listing = await self._listing(caller.agent, named.server)
            for template in listing.get("templates") or []:
                found.append(self._prefixed(caller, named, template))
        return found

    async def _listing(self, agent: Agent, server: Server) -> dict[str, Any]:
        try:
            return await self._ask(agent, server, "sessions.list_resources", "resources")
        except Refused:
            if len(await database_sync_to_async(_servers_of)(agent)) == 1:
                raise
            return {}  # one server down does not hide the others' resources on `/mcp/`

    @staticmethod
    def _prefixed(caller: Caller, named: Named, item: dict[str, Any]) -> dict[str, Any]:
        if caller.server:
            return item
        return {**item, "name": f"{named.path}{SEPARATOR}{item.get('name', '')}"}

    async def read_resource(self, caller: Caller, uri: str) -> dict[str, Any]:
        candidates = await self._each_server(caller)
        if not candidates:
            raise Refused("Unknown resource.", NOT_FOUND)
        if len(candidates) > 1:
            candidates = [await self._owner_of(caller, candidates, uri)]
        event = await self._ask(caller.agent, candidates[0].server, "sessions.read_resource", "resource.read", uri)
        # A part too large for a page was left out by the worker; the client hears that it was.
        contents = [
            item if "text" in item or "blob" in item else {**item, "text": str(item.get("omitted", ""))}
            for item in event.get("contents") or []
        ]
        return {"contents": contents}

    async def _owner_of(self, caller: Caller, candidates: list[Named], uri: str) -> Named:
        """On `/mcp/`, the server whose resources (or templates' prefix) hold `uri`."""
        for named in candidates:
            listing = await self._listing(caller.agent, named.server)
            if any(r.get("uri") == uri for r in listing.get("resources") or []):
                return named
        for named in candidates:
            listing = await self._listing(caller.agent, named.server)
            for template in listing.get("templates") or []:
                stem = str(template.get("uriTemplate", "")).split("{", 1)[0]
                if stem and uri.startswith(stem):
                    return named
        raise Refused(f"No server of yours lists the resource {uri}.", NOT_FOUND)

    async def subscribe(self, caller: Caller, uri: str, subscriber: str) -> int:
        """Subscribed at the worker holding the person's session with the resource's server, as the
        playground's socket subscribes; returns the server's id (the news name it)."""
        candidates = await self._each_server(caller)
        if not candidates:
            raise Refused("Unknown resource.", NOT_FOUND)
        named = candidates[0] if len(candidates) == 1 else await self._owner_of(caller, candidates, uri)
        await self._ask(
            caller.agent, named.server, "sessions.subscribe_resource", "resource.subscribed", uri, subscriber
        )
        return named.server.pk

    async def unsubscribe(self, caller: Caller, uri: str, subscriber: str, held: Any) -> None:
        server = await database_sync_to_async(Server.objects.filter(pk=held).first)()
        user_id = caller.agent.user.pk
        if server is None:
            await database_sync_to_async(queue.send)("sessions.unsubscribe_resource", (held, user_id, uri, subscriber))
        else:
            await database_sync_to_async(queue.to_session)(
                "sessions.unsubscribe_resource", server, user_id, uri, subscriber
            )

    async def resource_news(self, caller: Caller) -> AsyncIterator[tuple[Any, str]]:
        async with listening(caller.agent.user.pk) as inbox:
            while True:
                event = await inbox.next(3600)
                if event is not None and event.get("type") == "resource.updated":
                    yield event.get("server"), str(event.get("uri") or "")

    async def list_prompts(self, caller: Caller) -> list[dict[str, Any]]:
        found = []
        for named in await self._each_server(caller):
            try:
                listing = await self._ask(caller.agent, named.server, "sessions.list_prompts", "prompts")
            except Refused:
                if caller.server:
                    raise
                continue
            for prompt in listing.get("prompts") or []:
                found.append(self._prefixed(caller, named, prompt))
        return found

    async def _prompt_server(self, caller: Caller, name: str) -> tuple[Named, str]:
        candidates = await self._each_server(caller)
        if caller.server:
            if not candidates:
                raise Refused("Unknown server.", NOT_FOUND)
            return candidates[0], name
        for named in candidates:
            if name.startswith(named.path + SEPARATOR):
                return named, name[len(named.path) + len(SEPARATOR) :]
        raise Refused(f"Unknown prompt: {name}")

    async def get_prompt(self, caller: Caller, name: str, arguments: dict[str, str]) -> dict[str, Any]:
        named, prompt = await self._prompt_server(caller, name)
        event = await self._ask(
            caller.agent,
            named.server,
            "sessions.get_prompt",
            "prompt.got",
            prompt,
            {k: str(v) for k, v in arguments.items()},
        )
        return {k: event[k] for k in ("description", "messages") if k in event}

    async def complete(
        self, caller: Caller, ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any]
    ) -> dict[str, Any]:
        if ref.get("type") == "ref/prompt":
            named, prompt = await self._prompt_server(caller, str(ref.get("name", "")))
            target = {"prompt": prompt}
        else:
            candidates = await self._each_server(caller)
            uri = str(ref.get("uri", ""))
            named = candidates[0] if len(candidates) == 1 else await self._owner_of(caller, candidates, uri)
            target = {"template": uri}
        event = await self._ask(
            caller.agent,
            named.server,
            "sessions.complete",
            "completion",
            target,
            str(argument.get("name", "")),
            str(argument.get("value", "")),
            {k: str(v) for k, v in (context.get("arguments") or {}).items()},
        )
        return {k: event[k] for k in ("values", "total", "hasMore") if event.get(k) is not None}


# -- on the database's thread ---------------------------------------------------------------------


def _start(
    agent: Agent, only: str, name: str, arguments: dict[str, Any], came: actions.Came, as_task: bool = False
) -> ToolCall:
    """The call a name on the endpoint stands for, started: one trip to the database (each costs a
    thread hop and a connection check), the server found once. `as_task`: the client asked for (or
    can follow) a task, so a tool whose task support is optional runs as the server's task too."""
    server, tool = _where(agent, only, name)
    limits.take_tool_call(agent.user.pk)
    return actions.do_start_tool_call(agent.user, server, tool, arguments, came=came, as_task=as_task)


def _own_call(agent: Agent, call_id: str) -> ToolCall | None:
    """The person's own call through the endpoint; another's, or none, reads alike."""
    try:
        key = uuid.UUID(call_id)
    except ValueError:
        return None
    return ToolCall.objects.filter(pk=key, user=agent.user, via=Via.MCP).first()


def _open_questions(call_id: str, rounds: frozenset[str]) -> list[tuple[str, dict[str, Any]]]:
    """The call's forms and sampling requests still waiting, as input requests (for a retry that
    answered some, while the server asked more)."""
    questions = []
    if "elicitation" in rounds:
        for form in Elicitation.objects.filter(call_id=call_id, state=ElicitationState.PENDING):
            event = {"type": "elicitation.requested", "elicitation": str(form.pk), "message": form.message}
            page = {"mode": "url", "url": form.schema.get("url", "")} if form.mode == "url" else {}
            questions.append(_question({**event, "schema": form.schema, **page}))
    if "sampling" in rounds:
        for ask in SamplingRequest.objects.filter(call_id=call_id, state=SamplingState.PENDING):
            questions.append(_question({"type": "sampling.requested", "sampling": str(ask.pk), "request": ask.params}))
    return questions


def _record(call_id: str) -> ToolCall | None:
    return ToolCall.objects.filter(pk=call_id).first()


def _give_up(agent: Agent, call_id: str) -> None:
    """The client no longer waits: a held call is withdrawn, a running one cancelled."""
    reason = "The agent's client cancelled the call."
    if actions.do_withdraw_waiting_call(agent.user, call_id, reason):
        return
    try:
        channel = actions.do_running_call_channel(agent.user, call_id)
    except actions.AnswerError:
        return  # it ended meanwhile, or has not started: nothing to tell a worker
    actions.send_to_call(channel, {"type": "call.cancel"})


# -- tasks, on the database's thread ----------------------------------------------------------------

ALL_QUESTIONS = frozenset({"elicitation", "sampling"})
# How long tasks/cancel waits for the call to end, so that its answer can say `cancelled`.
CANCEL_WAIT_SECONDS = 10.0
# A failed or cancelled call's error, where no error of the server's is relayed (a tool error).
TASK_FAILED = -32603
APPROVAL_WAIT = "Waiting for your approval in the MCP Portal."
TASK_STATUS = {
    CallStatus.SUCCEEDED: "completed",
    CallStatus.TOOL_ERROR: "completed",
    CallStatus.FAILED: "failed",
    CallStatus.TIMED_OUT: "failed",
    CallStatus.REJECTED: "failed",
    CallStatus.INTERRUPTED: "failed",
    CallStatus.CANCELLED: "cancelled",
}


def _no_task() -> Refused:
    """Another's task id, an unknown one and a malformed one read alike: ids are not for probing."""
    return Refused("Task not found", INVALID_PARAMS)


def _own_task(agent: Agent, only: str, task_id: str) -> ToolCall | None:
    """The call a task id names, if it is this credential's to see: the person's own call through
    the endpoint, started as a task, on a server the credential may use (and on this endpoint's
    server, for `/mcp/<server>/`). Anything else reads as no task at all."""
    call = _own_call(agent, task_id)
    if call is None or not call.as_task:
        return None
    if agent.servers is not None and (call.server_id is None or not agent.may_use(call.server_id)):
        return None
    if only:
        try:
            if _one_server(agent, only).pk != call.server_id:
                return None
        except Refused:
            return None
    return call


def _answerable(caller: Caller) -> frozenset[str]:
    """What this client can answer itself: the 2026 era's rounds, the handshake era's requests."""
    if caller.protocol_version in MODERN_ERAS:
        return caller.rounds
    return frozenset(kind for kind, can in (("elicitation", caller.elicit), ("sampling", caller.sample)) if can)


def _wire_time(moment: datetime | None) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z") if moment else ""


def _outcome(call: ToolCall, era: str) -> tuple[str, dict[str, Any]]:
    """A finished call as a task's end: ("result", CallToolResult) when it completed, else
    ("error", JSON-RPC error): the server's own (-32042, relayed) or the call's failure in words."""
    try:
        shown = result_of(call.as_event(), era)
    except Refused as exc:
        return "error", {"code": exc.code, "message": str(exc), **({"data": exc.data} if exc.data else {})}
    if TASK_STATUS.get(call.status) == "completed":
        return "result", shown
    text = next((b.get("text") for b in shown.get("content") or [] if isinstance(b, dict)), None)
    return "error", {"code": TASK_FAILED, "message": str(text or f"The call ended {call.status}.")}


def _task_of(call: ToolCall, caller: Caller) -> dict[str, Any]:
    """The call as a task, as this caller sees it: its status and status line; in the 2026 era also
    what tasks/get carries (`inputRequests`, `result`, `error`).

    input_required only for a question this client can answer itself; one it cannot is the
    person's, in the browser, and the task stays working meanwhile."""
    upstream = call.task if isinstance(call.task, dict) else {}
    modern = caller.protocol_version in MODERN_ERAS
    task: dict[str, Any] = {"taskId": str(call.id), "createdAt": _wire_time(call.created_at)}
    updated = call.finished_at or call.started_at or call.created_at
    if call.status in TASK_STATUS:
        status = TASK_STATUS[call.status]
        if status == "completed":
            message = str(upstream.get("message") or "") or (
                "The tool answered with an error." if call.status == CallStatus.TOOL_ERROR else "Done."
            )
        else:
            message = f"{FAILED_AS.get(call.status, 'The call ended')}: {call.error or 'no reason was given.'}"
        if modern:
            outcome, answer = _outcome(call, caller.protocol_version)
            if status != "cancelled":
                task[outcome] = answer
    else:
        questions = _open_questions(str(call.id), ALL_QUESTIONS)
        mine = [(key, asked) for key, asked in questions if key.partition(":")[0] in _answerable(caller)]
        if mine:
            status = "input_required"
            first = mine[0][1]
            message = f"Waiting for your answer: {first['params'].get('message') or 'a request for a model reply'}"
            if modern:
                task["inputRequests"] = dict(mine)
        else:
            status = "working"
            if call.status == CallStatus.AWAITING_APPROVAL:
                message = APPROVAL_WAIT
            elif questions:
                message = "Waiting for an answer in the MCP Portal."
            else:
                message = str(upstream.get("message") or "") or (
                    "Running." if call.status == CallStatus.RUNNING else "Waiting for a worker."
                )
    task.update(status=status, statusMessage=message[:2000], lastUpdatedAt=_wire_time(updated))
    return task


def _task_now(caller: Caller, task_id: str) -> dict[str, Any]:
    call = _own_task(caller.agent, caller.server, task_id)
    if call is None:
        raise _no_task()
    return _task_of(call, caller)


def _task_page(caller: Caller, offset: int, limit: int) -> tuple[list[dict[str, Any]], int | None]:
    """The person's calls that came through the endpoint as tasks, newest first, as this
    credential may see them (its servers; this endpoint's server)."""
    agent: Agent = caller.agent
    calls = ToolCall.objects.filter(user=agent.user, via=Via.MCP, as_task=True)
    if agent.servers is not None:
        calls = calls.filter(server_id__in=agent.servers)
    if caller.server:
        try:
            calls = calls.filter(server=_one_server(agent, caller.server))
        except Refused:
            return [], None
    page = list(calls.order_by("-created_at")[offset : offset + limit + 1])
    following = offset + limit if len(page) > limit else None
    return [_task_of(call, caller) for call in page[:limit]], following


def _open_events(call_id: str) -> list[dict[str, Any]]:
    """The call's forms and sampling requests still waiting, as the events that asked them."""
    forms = Elicitation.objects.filter(call_id=call_id, state=ElicitationState.PENDING).order_by("created_at")
    asks = SamplingRequest.objects.filter(call_id=call_id, state=SamplingState.PENDING).order_by("created_at")
    return [elicitation_event(form) for form in forms] + [sampling_event(ask) for ask in asks]


def _tell_to_stop(agent: Agent, call_id: str) -> bool:
    """`_give_up`, saying whether anyone was told: False while the call has no worker yet."""
    if actions.do_withdraw_waiting_call(agent.user, call_id, "The agent's client cancelled the task."):
        return True
    try:
        channel = actions.do_running_call_channel(agent.user, call_id)
    except actions.AnswerError:
        return False  # pending, starting, or ended meanwhile
    actions.send_to_call(channel, {"type": "call.cancel"})
    return True
