"""The portal's own MCP server: the SDK's Streamable HTTP server, answering from a Gateway.

This module speaks MCP (both eras: the 2026-07-28 per-request envelope and the 2025-11-25 handshake
with `Mcp-Session-Id`, the SDK deciding per request) and knows nothing of the portal: what the tools
are, who may call them and how a call runs is the Gateway's to say (sessions/gateway.py), so the
endpoint and the playground share one call path. Whoever mounts it (sessions/endpoint.py) has
already checked the request's credential and puts what it found in the ASGI scope under `CALLER`.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import methods as wire
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

from .apps import EXTENSION as APPS_EXTENSION

log = logging.getLogger(__name__)

CALLER = "portal.caller"
# A JSON-RPC error for a request the portal refuses for what it asks (not a tool's own error).
INVALID_PARAMS = -32602
NOT_FOUND = -32002
# The handshake era's "open this page first, then call again" (the upstream server's, relayed).
URL_ELICITATION_REQUIRED = -32042
MODERN_ERAS = MODERN_PROTOCOL_VERSIONS

# Tasks (docs/mcp-endpoint.md, "Tasks"): the person's call record is the task, its id the task's id.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"  # the 2026-07-28 era's extension
RELATED_TASK = "io.modelcontextprotocol/related-task"
# Tasks entered the core spec at 2025-11-25; older handshake versions never hear of them.
HANDSHAKE_TASK_VERSIONS = frozenset({"2025-11-25"})
TASK_POLL_MS = 1000
TASK_LIST_PAGE = 50


class Refused(Exception):
    """A request the gateway will not answer; the text goes back as the JSON-RPC error's message."""

    def __init__(self, message: str, code: int = INVALID_PARAMS, data: Any = None):
        super().__init__(message)
        self.code = code
        self.data = data


@dataclass
class Caller:
    """Who asks, as the mounting side found them, and what the endpoint learned of their client."""

    # What the mounting side put in the scope (the person and their credential); opaque here.
    agent: Any
    # The one server of a `/mcp/<server>/` endpoint; "" for the aggregate `/mcp/`.
    server: str = ""
    client: str = ""
    protocol_version: str = ""
    # Whether the client gave a progress token: only then can it hear progress (and wait longer).
    wants_progress: bool = False
    progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None
    log: Callable[[str, str | None, Any], Awaitable[None]] | None = None
    # Set when the client declared the capability and this request can carry a request back to it
    # (the handshake era's stream); otherwise the person answers in the browser.
    elicit: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
    sample: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]] | None = None
    elicit_url: Callable[[str, str, str], Awaitable[dict[str, Any]]] | None = None
    elicit_done: Callable[[str], Awaitable[None]] | None = None
    # The 2026 era's way instead: a form or sampling request ends this request as `input_required`,
    # and the client's retry carries the answers (`answers`, keyed as asked) and `state` back.
    rounds: frozenset[str] = frozenset()  # "elicitation", "sampling": what the client can answer so
    answers: dict[str, dict[str, Any]] | None = None
    state: str | None = None
    # 2026 era: the request declared the tasks extension, so a call that would keep the client
    # waiting (held for approval, or running as the upstream server's task) may answer with a task.
    tasks: bool = False
    # The client renders MCP Apps (it declared their extension): it is offered app-only tools too.
    apps: bool = False


class Gateway(Protocol):
    # `live`: a server never listed may be listed first (False when only re-checking, see _watch).
    async def list_tools(self, caller: Caller, live: bool = True) -> list[dict[str, Any]]: ...
    async def call_tool(self, caller: Caller, name: str, arguments: dict[str, Any]) -> dict[str, Any]: ...
    async def list_resources(self, caller: Caller) -> list[dict[str, Any]]: ...
    async def list_resource_templates(self, caller: Caller) -> list[dict[str, Any]]: ...
    async def read_resource(self, caller: Caller, uri: str) -> dict[str, Any]: ...
    async def list_prompts(self, caller: Caller) -> list[dict[str, Any]]: ...
    async def get_prompt(self, caller: Caller, name: str, arguments: dict[str, str]) -> dict[str, Any]: ...
    async def complete(
        self, caller: Caller, ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any]
    ) -> dict[str, Any]: ...
    # Subscriptions (handshake era): `subscriber` names the session; returns what unsubscribe needs.
    async def subscribe(self, caller: Caller, uri: str, subscriber: str) -> Any: ...
    async def unsubscribe(self, caller: Caller, uri: str, subscriber: str, held: Any) -> None: ...
    # The person's resource news, as (held, uri): what subscribe returned, and the URI that changed.
    def resource_news(self, caller: Caller) -> AsyncIterator[tuple[Any, str]]: ...

    # Tasks. A task is described era-neutrally (taskId, status, statusMessage, createdAt,
    # lastUpdatedAt; in the 2026 era also result, error, inputRequests) and shaped for the wire here.
    # An id that is not the caller's own task raises Refused("Task not found").
    # The handshake era's task-augmented call: {"task": <task>}, or a CallToolResult when no call
    # could be recorded at all (an unknown tool, the rate limit).
    async def start_task(self, caller: Caller, name: str, arguments: dict[str, Any]) -> dict[str, Any]: ...
    async def get_task(self, caller: Caller, task_id: str) -> dict[str, Any]: ...
    # The call's CallToolResult once it ends (Refused for a task that failed or was cancelled).
    async def task_result(self, caller: Caller, task_id: str) -> dict[str, Any]: ...
    # The task after the cancel, and whether it was still going when asked.
    async def cancel_task(self, caller: Caller, task_id: str) -> tuple[dict[str, Any], bool]: ...
    async def update_task(self, caller: Caller, task_id: str, responses: dict[str, Any]) -> None: ...
    # One page of the person's tasks, newest first, and the next page's offset (None at the end).
    async def list_tasks(self, caller: Caller, offset: int, limit: int) -> tuple[list[dict[str, Any]], int | None]: ...


def _client_name(ctx: Any) -> str:
    params = ctx.session.client_params
    info = getattr(params, "client_info", None) if params is not None else None
    if info is None:
        info = getattr(ctx.session._connection, "client_info", None)  # the 2026 envelope's clientInfo
    if info is not None and getattr(info, "name", None):
        return f"{info.name} {info.version or ''}".strip()[:200]
    headers = ctx.request.headers if ctx.request is not None else {}
    return str(headers.get("user-agent", ""))[:200]


def _caller(ctx: Any, related_task: str | None = None) -> Caller:
    """Who asks, and how the portal can reach their client. `related_task`: the handshake era's
    `tasks/result` of that task, whose requests to the client say so (`_meta`, related-task)."""
    scope = ctx.request.scope if ctx.request is not None else {}
    found = scope.get(CALLER)
    if found is None:  # the mounting side always sets it; a request without one is refused
        raise MCPError(-32600, "Not authenticated.")
    meta = ctx.meta if isinstance(ctx.meta, dict) else {}
    # The wire's progressToken, under its name in the SDK's typed dict (or as sent).
    token = meta.get("progress_token", meta.get("progressToken"))
    session = ctx.session

    async def progress(value: float, total: float | None, message: str | None) -> None:
        await session.report_progress(value, total, message)

    async def to_log(level: str, logger: str | None, data: Any) -> None:
        try:
            await session.send_log_message(level, data, logger, related_request_id=ctx.request_id)
        except Exception:  # noqa: BLE001 - a log line the client cannot take must not end the call
            log.debug("could not relay a log message", exc_info=True)

    related = {RELATED_TASK: {"taskId": related_task}} if related_task else None
    on_stream = ServerMessageMetadata(related_request_id=ctx.request_id)

    async def elicit(message: str, schema: dict[str, Any]) -> dict[str, Any]:
        form = types.ElicitRequestFormParams(message=message, requested_schema=schema, _meta=related)
        answer = await session.send_request(types.ElicitRequest(params=form), types.ElicitResult, metadata=on_stream)
        return {"action": answer.action, "content": answer.content}

    async def elicit_url(message: str, url: str, elicitation_id: str) -> dict[str, Any]:
        page = types.ElicitRequestURLParams(message=message, url=url, elicitation_id=elicitation_id, _meta=related)
        answer = await session.send_request(types.ElicitRequest(params=page), types.ElicitResult, metadata=on_stream)
        return {"action": answer.action}

    async def elicit_done(elicitation_id: str) -> None:
        await session.send_elicit_complete(elicitation_id, related_request_id=ctx.request_id)

    async def sample(params: dict[str, Any]) -> dict[str, Any]:
        # The upstream server's own related-task names its task, not the portal's: never relayed.
        meta = {k: v for k, v in (params.get("_meta") or {}).items() if k != RELATED_TASK} | (related or {})
        params = {k: v for k, v in params.items() if k != "_meta"} | ({"_meta": meta} if meta else {})
        request = types.CreateMessageRequest.model_validate({"method": "sampling/createMessage", "params": params})
        reply = await session.send_request(request, types.CreateMessageResult, metadata=on_stream)
        content = reply.content if not isinstance(reply.content, list) else (reply.content or [None])[0]
        text = getattr(content, "text", "") or ""
        return {"action": "approve", "text": text, "model": reply.model or ""}

    capabilities = session.client_capabilities
    can_ask = session.can_send_request and capabilities is not None
    declared = {name for name in ("elicitation", "sampling") if getattr(capabilities, name, None) is not None}
    modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
    rounds = frozenset(declared) if modern else frozenset()
    return Caller(
        agent=found.agent,
        server=found.server,
        client=_client_name(ctx),
        protocol_version=ctx.protocol_version,
        wants_progress=token is not None,
        progress=progress,
        log=to_log,
        elicit=elicit if can_ask and "elicitation" in declared else None,
        sample=sample if can_ask and "sampling" in declared else None,
        elicit_url=elicit_url if can_ask and "elicitation" in declared else None,
        elicit_done=elicit_done if can_ask and "elicitation" in declared else None,
        rounds=rounds,
        tasks=modern and _declares(capabilities, TASKS_EXTENSION),
        apps=_declares(capabilities, APPS_EXTENSION),
    )


def _declares(capabilities: Any, extension: str) -> bool:
    return extension in (getattr(capabilities, "extensions", None) or {})


async def _answer(work: Awaitable[Any]) -> Any:
    try:
        return await work
    except Refused as exc:
        raise MCPError(exc.code, str(exc), exc.data) from None


def _digest(tools: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(tools, sort_keys=True, default=str).encode()).hexdigest()


def _watch(ctx: Any, gateway: Gateway, caller: Caller, tools: list[dict[str, Any]], every: float) -> None:
    """Tell a handshake-era client when the tools it may call change (a rule, a membership, a server's
    tools): its list is computed again every `every` seconds, and a change sends
    `notifications/tools/list_changed` on the session's own stream. The 2026 era has no session to
    send it on; its clients list again, and every call is decided again anyway."""
    connection = ctx.session._connection  # the SDK keeps the session's connection here
    if connection.session_id is None or every <= 0:
        return
    connection.state["tools"] = _digest(tools)
    if "watcher" in connection.state:
        return

    async def watch() -> None:
        while True:
            await asyncio.sleep(every)
            try:
                now = _digest(await gateway.list_tools(caller, live=False))
            except Exception:  # noqa: BLE001 - a failed look (a database restart) is tried again next time
                log.debug("could not list the tools again for a session", exc_info=True)
                continue
            if now != connection.state.get("tools"):
                connection.state["tools"] = now
                try:
                    await connection.send_tool_list_changed()
                except Exception:  # noqa: BLE001 - the session has gone: so does its watcher
                    return

    watcher = asyncio.ensure_future(watch())
    connection.state["watcher"] = watcher
    connection.exit_stack.callback(watcher.cancel)


def _subscriptions(ctx: Any, gateway: Gateway, caller: Caller) -> tuple[dict[str, Any], str]:
    """The session's subscriptions (URI → what the gateway holds for it) and its subscriber name,
    with the task that relays their news to the client, started with the first one: it ends with
    the session, which lets go of every subscription it still holds."""
    connection = ctx.session._connection  # the SDK keeps the session's connection here
    if connection.session_id is None:
        raise MCPError(-32601, "Subscriptions need a session (the handshake era).")
    subscriber = f"endpoint.{connection.session_id}"
    held: dict[str, Any] = connection.state.setdefault("subscriptions", {})
    if "news" not in connection.state:

        async def relay() -> None:
            async for key, uri in gateway.resource_news(caller):
                if held.get(uri) == key:
                    try:
                        await connection.send_resource_updated(uri)
                    except Exception:  # noqa: BLE001 - the session has gone
                        return

        async def let_go() -> None:
            news.cancel()
            for uri, key in list(held.items()):
                try:
                    await gateway.unsubscribe(caller, uri, subscriber, key)
                except Exception:  # noqa: BLE001 - the worker lets go when its connection closes anyway
                    log.debug("could not unsubscribe %s", uri, exc_info=True)

        news = asyncio.ensure_future(relay())
        connection.state["news"] = news
        connection.exit_stack.push_async_callback(let_go)
    return held, subscriber


# -- tasks: the person's call records as MCP tasks, in both eras ---------------------------------

_TASK_FIELDS = ("taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt")
# The handshake era's `capabilities.tasks`: tools/call may be task-augmented; tasks/list, tasks/cancel.
HANDSHAKE_TASKS_CAPABILITY = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


def handshake_task(task: dict[str, Any]) -> dict[str, Any]:
    """The 2025-11-25 `Task`. The portal keeps its records: no TTL (null is unlimited)."""
    return {**{k: task.get(k) for k in _TASK_FIELDS}, "ttl": None, "pollInterval": TASK_POLL_MS}


def modern_task(task: dict[str, Any]) -> dict[str, Any]:
    """The 2026-07-28 extension's `Task` (`ttlMs`, `pollIntervalMs`); the SDK has no type for it."""
    return {**{k: task.get(k) for k in _TASK_FIELDS}, "ttlMs": None, "pollIntervalMs": TASK_POLL_MS}


def _tasks_era(ctx: Any) -> bool:
    """Whether this `tasks/*` request is of the 2026 era (True) or the handshake era (False). A 2026
    request must declare the extension (-32021, as SEP-2133 says); a handshake version older than
    tasks has no such methods."""
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        if not _declares(ctx.session.client_capabilities, TASKS_EXTENSION):
            data = types.MissingRequiredClientCapabilityErrorData(
                required_capabilities=types.ClientCapabilities(extensions={TASKS_EXTENSION: {}})
            )
            raise MCPError(
                types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"Client did not declare required extension {TASKS_EXTENSION!r}",
                data.model_dump(by_alias=True, mode="json", exclude_none=True),
            )
        return True
    if ctx.protocol_version not in HANDSHAKE_TASK_VERSIONS:
        raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method)
    return False


class UpdateTaskRequestParams(types.RequestParams):
    """2026-07-28 `tasks/update`: answers to the task's `inputRequests`, keyed as they were asked."""

    task_id: str
    input_responses: dict[str, Any]


def _serve_tasks(server: Server[Any], gateway: Gateway) -> None:
    """The `tasks/*` requests of both eras, and the handshake era's task-augmented `tools/call`.

    The SDK (2.3.0) defines the task types but serves none of them, so they are bound here, as the
    demo server binds its own (sessions/mcp/demo_tasks.py): `tasks/*` are not spec methods to the
    runner, so they are plain request handlers; a 2026 `tools/call` answers `resultType: "task"`
    from its handler (a claimed shape the runner passes through); the handshake era's
    CreateTaskResult needs a middleware, since the runner sieves a 2025-11-25 `tools/call` result
    through CallToolResult.
    """

    async def get(ctx: Any, params: types.GetTaskRequestParams) -> dict[str, Any]:
        modern = _tasks_era(ctx)
        task = await _answer(gateway.get_task(_caller(ctx), params.task_id))
        if not modern:
            return handshake_task(task)  # GetTaskResult: the Task's fields at the top level
        detailed = modern_task(task)
        if "result" in task:
            complete = {"resultType": "complete", **task["result"]}
            detailed["result"] = wire.serialize_server_result("tools/call", ctx.protocol_version, complete)
        for key in ("error", "inputRequests"):
            if key in task:
                detailed[key] = task[key]
        return detailed

    async def result(ctx: Any, params: types.GetTaskPayloadRequestParams) -> dict[str, Any]:
        if _tasks_era(ctx):  # 2026: tasks/get carries the result
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method)
        found = await _answer(gateway.task_result(_caller(ctx, related_task=params.task_id), params.task_id))
        meta = found.get("_meta") if isinstance(found.get("_meta"), dict) else {}
        return {**found, "_meta": {**meta, RELATED_TASK: {"taskId": params.task_id}}}

    async def cancel(ctx: Any, params: types.CancelTaskRequestParams) -> dict[str, Any]:
        modern = _tasks_era(ctx)
        task, going = await _answer(gateway.cancel_task(_caller(ctx), params.task_id))
        if modern:
            return {}  # an acknowledgement; the task's end is for tasks/get to say
        if not going:
            raise MCPError(INVALID_PARAMS, f"Cannot cancel task: it is already {task.get('status')}", params.task_id)
        return handshake_task(task)  # CancelTaskResult

    async def update(ctx: Any, params: UpdateTaskRequestParams) -> dict[str, Any]:
        if not _tasks_era(ctx):
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method)
        await _answer(gateway.update_task(_caller(ctx), params.task_id, dict(params.input_responses)))
        return {}

    async def listed(ctx: Any, params: types.PaginatedRequestParams) -> dict[str, Any]:
        if _tasks_era(ctx):  # the 2026 extension has no tasks/list
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method)
        cursor = params.cursor or "0"
        if not cursor.isdigit() or len(cursor) > 9:
            raise MCPError(INVALID_PARAMS, "Invalid cursor")
        tasks, following = await _answer(gateway.list_tasks(_caller(ctx), int(cursor), TASK_LIST_PAGE))
        page: dict[str, Any] = {"tasks": [handshake_task(task) for task in tasks]}
        if following is not None:
            page["nextCursor"] = str(following)
        return page

    async def handshake(ctx: Any, call_next: Any) -> Any:
        """The 2025-11-25 wire: `capabilities.tasks` at initialize, and a task-augmented `tools/call`
        answered with CreateTaskResult (a middleware that answers without `call_next` owns its
        result; every other request goes through)."""
        if ctx.method == "initialize":
            answer = await call_next(ctx)
            if isinstance(answer, dict) and answer.get("protocolVersion") in HANDSHAKE_TASK_VERSIONS:
                answer.setdefault("capabilities", {})["tasks"] = copy.deepcopy(HANDSHAKE_TASKS_CAPABILITY)
            return answer
        params = ctx.params
        if (
            ctx.method == "tools/call"
            and ctx.protocol_version in HANDSHAKE_TASK_VERSIONS
            and isinstance(params, Mapping)
            and params.get("task") is not None
            # Before the handshake the runner's own gate must answer, so let the request through to it.
            and ctx.session.client_params is not None
        ):
            try:  # answering here skips the runner's validation of the params: so validate as it would
                call = types.CallToolRequestParams.model_validate(params, by_name=False)
            except ValidationError:
                raise MCPError(INVALID_PARAMS, "Invalid request parameters", "") from None
            started = await _answer(gateway.start_task(_caller(ctx), call.name, dict(call.arguments or {})))
            if isinstance(started.get("task"), dict):
                return {"task": handshake_task(started["task"])}
            return started  # no call could be recorded: the tool error, as a plain call gets it
        return await call_next(ctx)

    server.add_request_handler("tasks/get", types.GetTaskRequestParams, get)
    server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, result)
    server.add_request_handler("tasks/cancel", types.CancelTaskRequestParams, cancel)
    server.add_request_handler("tasks/update", UpdateTaskRequestParams, update)
    server.add_request_handler("tasks/list", types.PaginatedRequestParams, listed)
    server.middleware.append(handshake)
    # Advertised at `server/discover` (2026); the handshake era's `capabilities.tasks` is the middleware's.
    server.extensions[TASKS_EXTENSION] = {}


class _Server(Server[Any]):
    def create_initialization_options(self, notification_options: Any = None, *args: Any, **kwargs: Any) -> Any:
        # The handshake-era tool list changes are sent (_watch), so the capability says so.
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, *args, **kwargs)


def build_server(
    gateway: Gateway, name: str, version: str, instructions: str, watch_every: float = 10.0
) -> Server[Any]:
    """An SDK server whose every handler asks `gateway`, as the caller of the request."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        caller = _caller(ctx)
        tools = await _answer(gateway.list_tools(caller))
        _watch(ctx, gateway, caller, tools, watch_every)
        if caller.protocol_version in HANDSHAKE_TASK_VERSIONS:
            # Any tool may be called as a task here: the portal runs the call, an upstream task too.
            tools = [{**tool, "execution": {"taskSupport": "optional"}} for tool in tools]
        return types.ListToolsResult.model_validate({"tools": tools})

    async def call_tool(
        ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        caller = _caller(ctx)
        if params.input_responses or params.request_state:
            caller.answers = {
                key: answer.model_dump(by_alias=True, exclude_none=True, mode="json")
                for key, answer in (params.input_responses or {}).items()
            }
            caller.state = params.request_state
        result = await _answer(gateway.call_tool(caller, params.name, dict(params.arguments or {})))
        if result.get("resultType") == "input_required":
            return types.InputRequiredResult.model_validate(result)
        if result.get("resultType") == "task" and caller.tasks:
            # The extension's own result shape, which the runner passes through unsieved.
            return {"resultType": "task", **modern_task(result)}  # type: ignore[return-value]
        return types.CallToolResult.model_validate(result)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        found = await _answer(gateway.list_resources(_caller(ctx)))
        return types.ListResourcesResult.model_validate({"resources": found})

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        found = await _answer(gateway.list_resource_templates(_caller(ctx)))
        return types.ListResourceTemplatesResult.model_validate({"resourceTemplates": found})

    async def read_resource(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        found = await _answer(gateway.read_resource(_caller(ctx), str(params.uri)))
        return types.ReadResourceResult.model_validate(found)

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        found = await _answer(gateway.list_prompts(_caller(ctx)))
        return types.ListPromptsResult.model_validate({"prompts": found})

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        found = await _answer(gateway.get_prompt(_caller(ctx), params.name, dict(params.arguments or {})))
        return types.GetPromptResult.model_validate(found)

    async def complete(ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        ref = params.ref.model_dump(by_alias=True, exclude_none=True)
        argument = params.argument.model_dump(by_alias=True, exclude_none=True)
        context = params.context.model_dump(by_alias=True, exclude_none=True) if params.context else {}
        found = await _answer(gateway.complete(_caller(ctx), ref, argument, context))
        return types.CompleteResult.model_validate({"completion": found})

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        caller = _caller(ctx)
        held, subscriber = _subscriptions(ctx, gateway, caller)
        uri = str(params.uri)
        held[uri] = await _answer(gateway.subscribe(caller, uri, subscriber))
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        caller = _caller(ctx)
        held, subscriber = _subscriptions(ctx, gateway, caller)
        uri = str(params.uri)
        if uri in held:
            await _answer(gateway.unsubscribe(caller, uri, subscriber, held.pop(uri)))
        return types.EmptyResult()

    async def set_level(ctx: Any, params: Any) -> types.EmptyResult:
        # Log lines of the upstream servers are relayed as they come; the level is the servers' own.
        return types.EmptyResult()

    with warnings.catch_warnings():
        # logging/setLevel is deprecated in the 2026 era; handshake-era clients still send it.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server = _Server(
            name,
            version=version,
            instructions=instructions,
            # Without this, the SDK lists every tool (the person's whole list, decided) before each
            # 2026-era tools/call, to check its Mcp-Param-* headers. The portal routes on the body
            # alone, and the upstream server checks the headers of the portal's own request to it.
            get_tool_input_schema=lambda name: None,
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_resources=list_resources,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
            on_list_prompts=list_prompts,
            on_get_prompt=get_prompt,
            on_completion=complete,
            on_subscribe_resource=subscribe,
            on_unsubscribe_resource=unsubscribe,
            on_set_logging_level=set_level,
        )
    _serve_tasks(server, gateway)
    return server


@dataclass
class Found:
    """What the mounting side puts in the scope under CALLER."""

    agent: Any
    server: str = ""
    # What identifies the credential (never the secret): a handshake-era session is bound to it.
    credential: str = ""


class Endpoint:
    """The ASGI app of the endpoint: the SDK's session manager, started on the first request.

    Daphne runs no ASGI lifespan, so the manager's task group (which holds the handshake-era
    sessions) is started by the first request, on the server's loop, and lives as long as it.
    """

    def __init__(
        self,
        gateway: Gateway,
        name: str = "mcp-portal",
        version: str = "",
        instructions: str = "",
        watch_every: float = 10.0,
    ):
        server = build_server(gateway, name, version, instructions, watch_every)
        # The handshake era's sessions live in this process's memory: a restart forgets them, and
        # a client sending a forgotten session id hears 404 and initializes again (the spec's way).
        self.manager = StreamableHTTPSessionManager(app=server, stateless=False, session_idle_timeout=30 * 60)
        self._started: asyncio.Future[None] | None = None
        self._runner: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        assert self._started is not None
        try:
            async with self.manager.run():
                self._started.set_result(None)
                await asyncio.Event().wait()
        except BaseException as exc:
            if not self._started.done():
                self._started.set_exception(exc)
            raise

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            self._runner = asyncio.ensure_future(self._run())
        await asyncio.shield(self._started)
        found = scope.get(CALLER)
        if found is not None:
            # The SDK binds a handshake-era session (`Mcp-Session-Id`) to the credential that opened it:
            # another credential presenting its id hears the same 404 as for an unknown session.
            token = AccessToken(token="", client_id=found.credential, scopes=[])
            scope = {**scope, "user": AuthenticatedUser(token)}
        await self.manager.handle_request(scope, receive, send)
