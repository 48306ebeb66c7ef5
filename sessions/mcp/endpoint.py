"""The portal's own MCP server: the SDK's Streamable HTTP server, answering from a Gateway.

This module speaks MCP (both eras: the 2026-07-28 per-request envelope and the 2025-11-25 handshake
with `Mcp-Session-Id`, the SDK deciding per request) and knows nothing of the portal: what the tools
are, who may call them and how a call runs is the Gateway's to say (sessions/gateway.py), so the
endpoint and the playground share one call path. Whoever mounts it (sessions/endpoint.py) has
already checked the request's credential and puts what it found in the ASGI scope under `CALLER`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

log = logging.getLogger(__name__)

CALLER = "portal.caller"
# A JSON-RPC error for a request the portal refuses for what it asks (not a tool's own error).
INVALID_PARAMS = -32602
NOT_FOUND = -32002
# The handshake era's "open this page first, then call again" (the upstream server's, relayed).
URL_ELICITATION_REQUIRED = -32042
MODERN_ERAS = MODERN_PROTOCOL_VERSIONS


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


def _client_name(ctx: Any) -> str:
    params = ctx.session.client_params
    info = getattr(params, "client_info", None) if params is not None else None
    if info is None:
        info = getattr(ctx.session._connection, "client_info", None)  # the 2026 envelope's clientInfo
    if info is not None and getattr(info, "name", None):
        return f"{info.name} {info.version or ''}".strip()[:200]
    headers = ctx.request.headers if ctx.request is not None else {}
    return str(headers.get("user-agent", ""))[:200]


def _caller(ctx: Any) -> Caller:
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

    async def elicit(message: str, schema: dict[str, Any]) -> dict[str, Any]:
        answer = await session.elicit_form(message, schema, related_request_id=ctx.request_id)
        return {"action": answer.action, "content": answer.content}

    async def elicit_url(message: str, url: str, elicitation_id: str) -> dict[str, Any]:
        answer = await session.elicit_url(message, url, elicitation_id, related_request_id=ctx.request_id)
        return {"action": answer.action}

    async def elicit_done(elicitation_id: str) -> None:
        await session.send_elicit_complete(elicitation_id, related_request_id=ctx.request_id)

    async def sample(params: dict[str, Any]) -> dict[str, Any]:
        request = types.CreateMessageRequest.model_validate({"method": "sampling/createMessage", "params": params})
        reply = await session.send_request(
            request, types.CreateMessageResult, metadata=ServerMessageMetadata(related_request_id=ctx.request_id)
        )
        content = reply.content if not isinstance(reply.content, list) else (reply.content or [None])[0]
        text = getattr(content, "text", "") or ""
        return {"action": "approve", "text": text, "model": reply.model or ""}

    capabilities = session.client_capabilities
    can_ask = session.can_send_request and capabilities is not None
    declared = {name for name in ("elicitation", "sampling") if getattr(capabilities, name, None) is not None}
    rounds = frozenset(declared) if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else frozenset()
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
    )


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
        return _Server(
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
