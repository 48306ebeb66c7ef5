"""The worker-side connection pool: live MCP sessions on one asyncio loop thread.

Each worker process owns one pool. A connection is memoized by `ConnectionKey`
(server, config fingerprint, credential owner) and reused across calls and tasks;
its tool list is cached until the server says it changed or a caller asks to refresh.
The SDK requires a client to be entered and exited in the same task, so each
connection lives inside one long-running task and calls reach it from other tasks.

The lifecycle, every setting and what was measured are in docs/connections.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import logging
import math
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TypeVar

import anyio
from mcp import Client, types
from mcp.client.extension import advertise
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, INVALID_REQUEST

from . import apps
from .client_tasks import ClientTasks, TaskingClient
from .config import MODERN_VERSION, ConnectionKey, Negotiated, ServerConfig
from .errors import (
    diagnose,
    is_connection_lost,
    is_session_expired,
    is_terminal,
    protocol_message,
)
from .failure import ConnectionFailed, Failure
from .naming import annotate_tools
from .processes import become_subreaper
from .resource_subscriptions import ResourceSubscriptions, UpdateSink
from .results import (
    call_result_to_dict,
    completion_to_dict,
    dump,
    listed,
    prompt_to_dict,
    resource_contents_to_dict,
    tool_to_dict,
)
from .tasks import (
    RELATED_TASK,
    CreatedTask,
    LegacyTasks,
    ModernTasks,
    TaskEnded,
    TasksExtension,
    TaskSink,
    TaskState,
    follow,
    server_runs_tool_tasks,
)
from .transports import HttpTrace, open_transport, read_tail
from .variables import MissingVariable, expand_config
from .wire import Exchange, Wire, tapped

log = logging.getLogger(__name__)
T = TypeVar("T")

CLIENT_INFO = types.Implementation(name="mcp-portal", version="0.1.0")
MAX_LIST_PAGES = 100  # a server that hands out cursors forever must not hang the worker
MAX_CONSECUTIVE_TERMINAL_ERRORS = 3  # as in Claude Code: three in a row close the connection
MAX_SESSION_RETRIES = 1  # as in Claude Code: an expired session is reconnected and retried once
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")  # RFC 5424 order
ProgressSink = Callable[[float, float | None, str | None], Awaitable[None]]
# An elicitation: (message, requested schema, request id) -> {"action": ..., "content": {...}}
ElicitSink = Callable[[str, dict[str, Any], str], Awaitable[dict[str, Any]]]
# A URL-mode elicitation: (message, url, elicitation id, request id) -> {"action": ...}; the person's
# consent to open the URL is "accept".
ElicitUrlSink = Callable[[str, str, str, str], Awaitable[dict[str, Any]]]
# The server says a URL elicitation is complete (handshake era): (elicitation id)
ElicitDoneSink = Callable[[str], Awaitable[None]]
# A sampling request: (the request's params as JSON, request id) -> {"action": "approve", "text": ..., "model": ...}
# or {"action": "decline"}
SampleSink = Callable[[dict[str, Any], str], Awaitable[dict[str, Any]]]
# A server log message: (level, logger, data)
LogSink = Callable[[str, str | None, Any], Awaitable[None]]


@dataclass
class CallHooks:
    """Where the server's words during one call go: progress, elicitation forms, log messages.

    Server requests and notifications are routed to the call being served (see `Connection`).
    While a person answers an elicitation the call's deadline does not count (mcp-sdk-notes §4:
    in the handshake era the request clock keeps running during the callback).
    """

    on_progress: ProgressSink | None = None
    on_elicit: ElicitSink | None = None
    on_elicit_url: ElicitUrlSink | None = None
    on_elicit_done: ElicitDoneSink | None = None
    on_sample: SampleSink | None = None
    on_log: LogSink | None = None
    # The call became an MCP task, or its task moved on (sessions/mcp/tasks.py): its state as a dict.
    on_task: TaskSink | None = None
    # Whether a task this call follows is cancelled on the server when the call is stopped: not
    # when the worker is stopping and the next one resumes it.
    cancel_on_stop: Callable[[], bool] = lambda: True
    # The call's JSON-RPC messages as they pass (wire.py); shared by the copies `scrubbing` makes.
    exchange: Exchange = field(default_factory=Exchange)
    _scope: anyio.CancelScope | None = None
    _seconds: float = 0.0

    def pause_deadline(self) -> None:
        if self._scope is not None:
            self._scope.deadline = math.inf

    def restart_deadline(self) -> None:
        if self._scope is not None:
            self._scope.deadline = anyio.current_time() + self._seconds

    def drop_deadline(self) -> None:
        """The call became a task: its polls have deadlines of their own, the whole its TTL."""
        self.pause_deadline()
        self._scope = None


NO_TURN = contextlib.nullcontext()

# The call this task is serving. In 2026 mode server requests arrive as input_required rounds whose
# callbacks run in the caller's task, so this is visible there; in the handshake era they run in the
# session's receive loop, and the connection falls back to its calls in flight.
serving: contextvars.ContextVar[CallHooks | None] = contextvars.ContextVar("serving", default=None)


def url_required(error: types.ErrorData) -> Failure:
    """Error -32042: the server wants the person to visit pages first; the call can be retried after."""
    data = error.data if isinstance(error.data, dict) else {}
    wanted = [e for e in data.get("elicitations") or [] if isinstance(e, dict)]
    return Failure("url_elicitation_required", error.message, elicitations=wanted[:10])


def root_name(uri: str) -> str:
    """What a person calls a root: its last path segment."""
    return uri.rstrip("/").rsplit("/", 1)[-1] or uri


# JSON-RPC errors that are the server's answer to one request (unknown resource or prompt,
# bad arguments, a failing handler): the connection is fine, and the server's message says why.
URL_ELICITATION_REQUIRED = -32042
SERVER_REFUSALS = frozenset({types.METHOD_NOT_FOUND, types.INVALID_PARAMS, types.INTERNAL_ERROR, -32002})

# How a caller reads a JSON-RPC error that is the server's answer to its own request, not a fault
# of the connection: the diagnosis to raise, or None to recover from it as from any other error.
Answered = Callable[[MCPError], Failure | None]


def tool_answer(error: MCPError) -> Failure | None:
    """A tool call's: -32042 asks the person to visit pages first (`url_required`)."""
    return url_required(error.error) if error.error.code == URL_ELICITATION_REQUIRED else None


def request_answer(error: MCPError) -> Failure | None:
    """Resources', prompts' and completions': the server refused this one request (SERVER_REFUSALS).
    Read before diagnose(): on 2026 HTTP these come with HTTP 400, which is not a transport fault."""
    if error.error.code in SERVER_REFUSALS:
        return Failure("protocol", protocol_message(error.error.code, error.error.message))
    return None


# Connection statuses as the portal shows them ("disabled" is the registry's, not the pool's).
CONNECTED, PENDING, NEEDS_AUTH, FAILED, CLOSED = "connected", "pending", "needs-auth", "failed", "closed"


@dataclass
class PoolSettings:
    max_connections: int = 200
    idle_seconds: float = 600.0
    local_batch: int = 3
    remote_batch: int = 20
    close_timeout: float = 5.0
    health_seconds: float = 60.0  # 0 turns the periodic health check off
    # A server that adds tools one by one says "changed" once per tool: its owner hears once per window.
    list_changed_seconds: float = 0.2


class PoolEvents:
    """What the pool tells its owner (the worker), on the pool's loop. Override what you need."""

    async def status(self, key: ConnectionKey, config: ServerConfig, status: str, failure: Failure | None) -> None:
        """A connection became connected / pending / needs-auth / failed, or was closed."""

    async def tools_changed(self, key: ConnectionKey, config: ServerConfig) -> None:
        """The server said its tool list changed; the cached list was dropped."""

    async def negotiated(self, key: ConnectionKey, config: ServerConfig, negotiated: Negotiated) -> None:
        """A connection negotiated an era other than the one the config remembers."""

    async def server_log(
        self, key: ConnectionKey, config: ServerConfig, level: str, logger: str | None, data: Any
    ) -> None:
        """A log message that belongs to no call (see `Connection._on_log`): the connection's own log."""

    async def aclose(self) -> None:
        """The pool is shutting down, its connections closed: finish what is pending."""


@dataclass
class CallOutcome:
    """How one tool call ended: succeeded, tool_error, failed, timed_out or rejected."""

    status: str
    result: dict[str, Any] | None = None
    failure: Failure | None = None
    duration_ms: float = 0.0
    errors: list[dict[str, Any]] = field(default_factory=list)  # per-field argument errors
    retried: bool = False  # the session had expired and the call ran again on a new one
    truncated: dict[str, Any] | None = None  # set by the caller that cut the result
    exchange: list[dict[str, Any]] = field(default_factory=list)  # the raw JSON-RPC view (wire.py)


# A failed call's status by its failure's kind ("cancelled": the server cancelled the call's task).
CALL_STATUS_OF_FAILURE = {"timeout": "timed_out", "cancelled": "cancelled"}


class RequestTimedOut(Exception):
    def __init__(self, seconds: float):
        super().__init__(f"no answer from the server within {seconds:g} s")
        self.seconds = seconds


class WatchedReadStream:
    """The transport's read stream, telling the connection when it ends: the server closed it (a stdio
    process that exited, an event stream that dropped), so the session is dead even while no call
    uses it. Everything else is the stream's own (the SDK reads `last_context` off it, for one)."""

    def __init__(self, inner: Any, on_end: Callable[[], None]):
        self._inner = inner
        self._on_end = on_end

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def receive(self) -> Any:
        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._on_end()
            raise

    def __aiter__(self) -> WatchedReadStream:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> WatchedReadStream:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> bool | None:
        return await self._inner.__aexit__(*exc)


@dataclass
class Connection:
    key: ConnectionKey | None
    config: ServerConfig
    on_closed: Callable[[Connection], None] = lambda _conn: None
    on_tools_changed: Callable[[Connection], Awaitable[None]] | None = None
    client: Client | None = None
    tools: list[dict[str, Any]] | None = None
    negotiated: Negotiated | None = None
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False
    terminal_errors: int = 0
    ended_by: BaseException | None = None
    open_failure: Failure | None = None
    _ready: asyncio.Future[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _errlog: Any = None
    _last_stderr: str = ""
    _turns: asyncio.Lock | None = None  # see `turn`
    http: HttpTrace = field(default_factory=HttpTrace)
    calls: list[CallHooks] = field(default_factory=list)  # in flight, oldest first
    following: dict[str, CallHooks] = field(default_factory=dict)  # handshake-era tasks, by id, to their calls
    client_tasks: ClientTasks = field(default_factory=ClientTasks)  # the server's requests run as tasks
    on_server_log: LogSink | None = None  # logs that arrive outside any call
    subscriptions: ResourceSubscriptions | None = None
    wire: Wire = field(init=False)

    def __post_init__(self) -> None:
        def sending() -> Exchange | None:
            hooks = serving.get()  # only a call's own task: a listing beside a call is not the call's
            return hooks.exchange if hooks is not None else None

        def served() -> Exchange | None:
            hooks = self._serving()
            return hooks.exchange if hooks is not None else None

        self.wire = Wire(sending, served)

    async def open(self) -> None:
        """Start the connection's task and wait, bounded by the connect timeout, for the handshake."""
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._errlog = tempfile.TemporaryFile(mode="w+", prefix="mcp-stderr-")
        self._task = loop.create_task(self._live(), name=f"mcp-connection-{self.config.name}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.config.connect_timeout)
        except BaseException as exc:
            failure = self.diagnose(exc)
            if isinstance(exc, asyncio.TimeoutError):
                failure = Failure(
                    "timeout",
                    f"no handshake within {self.config.connect_timeout:g} s",
                    self.stderr_tail(),
                )
            self.open_failure = failure  # for the callers who waited on this same opening
            # A connection that never came up has nothing to shut down gracefully.
            await self.close(graceful=False)
            raise ConnectionFailed(failure) from exc

    @contextlib.asynccontextmanager
    async def _watched(self, transport: contextlib.AbstractAsyncContextManager[Any]) -> Any:
        async with transport as (read_stream, write_stream, *rest):
            yield (WatchedReadStream(read_stream, self._transport_ended), write_stream, *rest)

    def _transport_ended(self) -> None:
        """The server's side ended by itself (not through close()): end the connection now, so the
        pool drops it and says so at once, and the next call opens a new one instead of failing."""
        if self._stop.is_set() or self._ready is None or not self._ready.done():
            return
        log.info("%s closed the connection", self.config.name)
        if self.ended_by is None:
            self.ended_by = MCPError(code=CONNECTION_CLOSED, message="Connection closed")
        self._stop.set()

    def _client(self, config: ServerConfig) -> Client:
        mode, discover = config.connect_mode()
        return TaskingClient(
            self._watched(tapped(open_transport(config, self._errlog, self.http), self.wire)),
            mode=mode,
            prior_discover=types.DiscoverResult.model_validate(discover) if discover else None,
            client_info=CLIENT_INFO,
            message_handler=self._on_message,
            elicitation_callback=self._on_elicit,
            list_roots_callback=self._on_list_roots,
            sampling_callback=self._on_sample,
            logging_callback=self._on_log,
            log_level=config.log_level or None,  # type: ignore[arg-type]
            cache=None,  # the pool caches lists itself, per connection
            # The playground renders MCP Apps, so a server may offer the tools that carry one.
            extensions=[TasksExtension(self._follow_created), advertise(apps.EXTENSION, apps.CLIENT_SETTINGS)],
            client_tasks=self.client_tasks,
        )

    def _serving(self, params: Any = None) -> CallHooks | None:
        hooks = serving.get() or self._following_task(params)
        if hooks is None and self.calls:
            # Handshake era: the request arrives on the session's receive loop, outside the caller's
            # task, and carries nothing that says which call it is for (the SDK hands the callback
            # only the server's own request id and _meta). On one person's connection every call in
            # flight is theirs, so the most recent one answers. A shared connection serves one
            # request at a time (`turn`), so the call in flight, if any, is the one asking.
            hooks = self.calls[-1]
        return hooks

    def _following_task(self, params: Any) -> CallHooks | None:
        """A request a handshake-era server sends for a task names it (the related-task `_meta`): it
        is for the call following that task, whatever else is in flight."""
        meta = getattr(params, "meta", None)
        related = meta.get(RELATED_TASK) if isinstance(meta, dict) else None
        task_id = related.get("taskId") if isinstance(related, dict) else None
        return self.following.get(task_id) if isinstance(task_id, str) else None

    @property
    def one_request_at_a_time(self) -> bool:
        """Several members' calls on one handshake-era session: a server request could not be told apart."""
        return (
            self.key is not None and self.key.shared and self.negotiated is not None and self.negotiated.era == "legacy"
        )

    def turn(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Held around every request on a connection that serves one at a time; nothing on the others."""
        if not self.one_request_at_a_time:
            return NO_TURN
        if self._turns is None:
            self._turns = asyncio.Lock()
        return self._turns

    async def _on_elicit(self, ctx: Any, params: types.ElicitRequestParams) -> types.ElicitResult | types.ErrorData:
        hooks = self._serving(params)
        request_id = str(getattr(ctx, "request_id", "") or "")
        if isinstance(params, types.ElicitRequestURLParams) and hooks is not None and hooks.on_elicit_url is not None:
            hooks.pause_deadline()
            try:
                # At 2026-07-28 there is no elicitation id: the request id names it.
                eid = params.elicitation_id or request_id
                answer = await hooks.on_elicit_url(params.message, params.url, eid, request_id)
            finally:
                hooks.restart_deadline()
            action = answer.get("action")
            return types.ElicitResult(action=action if action in ("accept", "decline") else "cancel")
        if hooks is None or hooks.on_elicit is None or not isinstance(params, types.ElicitRequestFormParams):
            return types.ErrorData(code=INVALID_REQUEST, message="nobody here can answer this elicitation")
        hooks.pause_deadline()
        try:
            answer = await hooks.on_elicit(params.message, dict(params.requested_schema), request_id)
        finally:
            hooks.restart_deadline()
        action = answer.get("action")
        if action == "accept":
            return types.ElicitResult(action="accept", content=answer.get("content") or {})
        return types.ElicitResult(action="decline" if action == "decline" else "cancel")

    async def _on_sample(
        self, ctx: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        """A person reads the messages and writes (or edits) the reply: no model is called."""
        hooks = self._serving(params)
        if hooks is None or hooks.on_sample is None:
            return types.ErrorData(code=INVALID_REQUEST, message="nobody here can answer this sampling request")
        hooks.pause_deadline()
        try:
            request_id = str(getattr(ctx, "request_id", "") or "")
            asked = params.model_dump(mode="json", by_alias=True, exclude_none=True)
            answer = await hooks.on_sample(asked, request_id)
        finally:
            hooks.restart_deadline()
        if answer.get("action") != "approve":
            # What the spec suggests for a person's refusal: an error the server can tell apart.
            return types.ErrorData(code=-1, message="The user declined the sampling request.")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=str(answer.get("text", ""))),
            model=str(answer.get("model") or "human"),
            stop_reason="endTurn",
        )

    async def _answer_input(self, key: str, request: Any) -> Any:
        """A 2026 task's input request, answered as the same request on its own would be."""
        ctx = SimpleNamespace(request_id=key)
        if isinstance(request, types.ElicitRequest):
            return await self._on_elicit(ctx, request.params)
        if isinstance(request, types.CreateMessageRequest):
            return await self._on_sample(ctx, request.params)
        return await self._on_list_roots(ctx)

    async def _follow_created(self, created: CreatedTask, ctx: Any) -> types.CallToolResult:
        """A 2026 server answered a call with a task: follow it in the caller's task (the SDK calls
        this from `Client.call_tool`, where `serving` names the call)."""
        hooks = serving.get() or CallHooks()
        hooks.drop_deadline()
        follower = ModernTasks(ctx.session, self.config.request_timeout, self._answer_input)
        try:
            task = TaskState.from_wire(created.as_wire(), follower.era)
        except ValueError as exc:
            raise TaskEnded(Failure("protocol", f"The server's task could not be read: {exc}")) from exc
        return await self._follow(follower, task, hooks)

    def _follower(self, client: Client) -> LegacyTasks | ModernTasks:
        if self.negotiated is not None and self.negotiated.era == "modern":
            return ModernTasks(client.session, self.config.request_timeout, self._answer_input)
        return LegacyTasks(client.session, self.config.request_timeout)

    async def _on_list_roots(self, ctx: Any) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=uri, name=root_name(uri)) for uri in self.config.roots])

    async def _on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        # Servers in the handshake era may ignore logging/setLevel: the level is enforced here too.
        wanted = LOG_LEVELS.index(self.config.log_level) if self.config.log_level in LOG_LEVELS else len(LOG_LEVELS)
        if params.level in LOG_LEVELS and LOG_LEVELS.index(params.level) < wanted:
            return
        # Which call a log message belongs to. In 2026-07-28 it arrives in the call's own task. In the
        # handshake era nothing in it names a request: with one call in flight it is taken as that
        # call's (servers log while they serve); with several, or none, it goes to the connection's
        # log, never to a call it may have nothing to do with (`_serving` guesses for requests,
        # which must be answered by someone; a log line need not be).
        hooks = serving.get()
        if hooks is None and len(self.calls) == 1:
            hooks = self.calls[0]
        sink = hooks.on_log if hooks is not None else self.on_server_log
        if sink is not None:
            await sink(str(params.level), params.logger, params.data)

    async def _live(self) -> None:
        assert self._ready is not None
        try:
            # Expanded here, on the way to the transport, and nowhere else: nothing stores the values.
            config = expand_config(self.config)
            client = self._client(config)
            async with client:
                if config.connect_mode() == (MODERN_VERSION, None):
                    # "modern" with nothing remembered: the SDK would adopt an empty stand-in, so
                    # ask the server once; a handshake-only server fails here, with its error.
                    raw = await client.session.send_discover(MODERN_VERSION)
                    client.session.adopt(types.DiscoverResult.model_validate(raw))
                self.client = client
                self.negotiated = self._what_was_negotiated(client)
                if self.negotiated.era == "legacy" and config.log_level and client.server_capabilities.logging:
                    # The handshake era has no per-request opt-in: ask once for the level wanted.
                    try:
                        await self.request(lambda: client.set_logging_level(config.log_level))  # type: ignore[arg-type]
                    except Exception as exc:  # noqa: BLE001 - a server that will not filter still serves calls
                        log.debug("%s refused logging/setLevel: %r", self.config.name, exc)
                async with anyio.create_task_group() as tg:
                    if self.negotiated.era == "modern" and client.server_capabilities.tools is not None:
                        tg.start_soon(self._listen_for_changes, client)
                    self._ready.set_result(None)
                    await self._stop.wait()
                    tg.cancel_scope.cancel()
        except BaseException as exc:  # noqa: BLE001 - every way out must release the waiters
            if not self._ready.done():
                # Never hand a CancelledError to the waiters: to them it would look like their own.
                closed = ConnectionError("the connection was closed before its handshake finished")
                self._ready.set_exception(closed if isinstance(exc, asyncio.CancelledError) else exc)
            elif not isinstance(exc, asyncio.CancelledError):
                self.ended_by = exc
                log.info("connection to %s ended: %r", self.config.name, exc)
        finally:
            self.closed = True
            self.client = None
            self.client_tasks.close()
            self.on_closed(self)
            if self._errlog is not None:
                self._last_stderr = self.stderr_tail()
                self._errlog.close()

    def _what_was_negotiated(self, client: Client) -> Negotiated:
        discover = client.session.discover_result
        return Negotiated(
            era="modern" if discover is not None else "legacy",
            protocol_version=client.protocol_version,
            discover=dump(discover) if discover is not None else None,
            fingerprint=self.config.fingerprint(),
        )

    async def _listen_for_changes(self, client: Client) -> None:
        """In 2026-07-28 change notifications arrive only on a `subscriptions/listen` stream."""
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    await self._tools_changed()
        except Exception as exc:  # noqa: BLE001 - a server without listen still serves calls
            log.debug("no change stream from %s: %r", self.config.name, exc)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            await self._tools_changed()
        elif isinstance(message, types.ElicitCompleteNotification):
            hooks = self._serving()
            if hooks is not None and hooks.on_elicit_done is not None:
                await hooks.on_elicit_done(str(message.params.elicitation_id))
        elif isinstance(message, types.ResourceUpdatedNotification) and self.subscriptions is not None:
            await self.subscriptions.on_notification(str(message.params.uri))
        elif isinstance(message, Exception):
            self.record(message)

    async def _tools_changed(self) -> None:
        self.tools = None
        if self.on_tools_changed is not None:
            await self.on_tools_changed(self)

    def record(self, exc: BaseException | None) -> bool:
        """Count consecutive terminal transport errors; True when the connection should be closed."""
        if exc is not None and is_terminal(exc):
            self.terminal_errors += 1
            if self.terminal_errors >= MAX_CONSECUTIVE_TERMINAL_ERRORS:
                log.info("closing %s after %d terminal errors in a row", self.config.name, self.terminal_errors)
                self._stop.set()
                return True
            return False
        self.terminal_errors = 0
        return False

    def session_expired(self, exc: BaseException) -> bool:
        return is_session_expired(exc, self.http.session_expired)

    def diagnose(self, exc: BaseException) -> Failure:
        if isinstance(exc, RequestTimedOut):
            return Failure("timeout", str(exc), self.stderr_tail())
        return diagnose(exc, self.config, self.stderr_tail(), self.http.last_error_status, self.http.redirect)

    def stderr_tail(self) -> str:
        if self._errlog is None or self._errlog.closed or self.config.transport != "stdio":
            return self._last_stderr
        return read_tail(self._errlog)

    @property
    def subscribed(self) -> bool:
        """A connection that carries resource subscriptions is in use even when no call is."""
        return bool(self.subscriptions and self.subscriptions.subscribers)

    def describe(self) -> dict[str, Any]:
        client = self.client
        assert client is not None
        info = client.server_info
        return {
            "server_name": info.name if info else "",
            "server_version": info.version if info else "",
            "protocol_version": client.protocol_version,
            "era": self.negotiated.era if self.negotiated else "",
            "capabilities": dump(client.server_capabilities),
            "instructions": client.instructions or "",
        }

    async def request(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run one request under the config's deadline (an anyio cancel scope, see call_tool)."""
        seconds = self.config.request_timeout
        with anyio.CancelScope(deadline=anyio.current_time() + seconds):
            async with self.turn():
                return await fn()
        raise RequestTimedOut(seconds)

    async def list_tools(self, refresh: bool = False) -> list[dict[str, Any]]:
        if self.tools is not None and not refresh:
            return self.tools
        client = self.client
        assert client is not None
        if client.server_capabilities.tools is None:
            self.tools = []  # list only what the capabilities declare
            return self.tools
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await self.request(lambda c=cursor: client.list_tools(cursor=c, cache_mode="refresh"))
            tools.extend(tool_to_dict(tool) for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = annotate_tools(self.config.name, tools)
        return self.tools

    async def call_tool(
        self, tool: str, arguments: dict[str, Any], hooks: CallHooks | None = None, as_task: bool = False
    ) -> types.CallToolResult:
        """Call a tool under the request deadline.

        The deadline is an anyio cancel scope rather than the SDK's read timeout, so that progress
        can push it back (`reset_timeout_on_progress`): the SDK cannot reset its own. Running out
        cancels the request (the server gets `notifications/cancelled`); the session stays usable.
        """
        client = self.client
        assert client is not None
        seconds = self.config.request_timeout
        hooks = hooks or CallHooks()
        token = serving.set(hooks)
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + seconds) as scope:
                hooks._scope, hooks._seconds = scope, seconds

                async def progress(value: float, total: float | None, message: str | None) -> None:
                    if self.config.reset_timeout_on_progress and math.isfinite(scope.deadline):
                        hooks.restart_deadline()
                    if hooks.on_progress is not None:
                        await hooks.on_progress(value, total, message)

                # Waiting for the turn counts against this call's deadline: it has not reached the server.
                async with self.turn():
                    self.calls.append(hooks)
                    try:
                        if as_task and self._runs_tasks(client):
                            return await self._call_as_task(client, tool, arguments, hooks)
                        return await client.call_tool(tool, arguments, progress_callback=progress)
                    finally:
                        self.calls.remove(hooks)
        finally:
            serving.reset(token)
            self.wire.forget(hooks.exchange)
        raise RequestTimedOut(seconds)

    def _runs_tasks(self, client: Client) -> bool:
        """Asked for by the client only in the handshake era: in 2026 the server decides."""
        legacy = self.negotiated is None or self.negotiated.era == "legacy"
        return legacy and server_runs_tool_tasks(client.server_capabilities)

    async def _call_as_task(
        self, client: Client, tool: str, arguments: dict[str, Any], hooks: CallHooks
    ) -> types.CallToolResult:
        follower = LegacyTasks(client.session, self.config.request_timeout)
        created = await follower.create(tool, arguments)
        if isinstance(created, types.CallToolResult):
            return created
        hooks.drop_deadline()
        return await self._follow(follower, created, hooks)

    async def _follow(
        self, follower: LegacyTasks | ModernTasks, task: TaskState, hooks: CallHooks
    ) -> types.CallToolResult:
        self.following[task.id] = hooks
        try:
            return await follow(follower, task, hooks.on_task, hooks.cancel_on_stop)
        finally:
            self.following.pop(task.id, None)

    async def resume_task(self, task: dict[str, Any], hooks: CallHooks) -> types.CallToolResult:
        """Follow a task a call started before its worker stopped (its state as `on_task` had it)."""
        client = self.client
        assert client is not None
        follower = self._follower(client)
        state = TaskState(**{**task, "era": follower.era})
        token = serving.set(hooks)
        self.calls.append(hooks)
        try:
            async with self.turn():
                return await self._follow(follower, state, hooks)
        finally:
            self.calls.remove(hooks)
            serving.reset(token)
            self.wire.forget(hooks.exchange)

    async def check_health(self) -> None:
        """A ping in the handshake era; in 2026 (no ping) a `server/discover`, which is stateless and cheap."""
        client = self.client
        if client is None:
            raise ConnectionError("the connection is closed")
        if self.negotiated is not None and self.negotiated.era == "modern":
            await self.request(lambda: client.session.send_discover(client.protocol_version))
        else:
            await self.request(lambda: client.session.send_ping())

    async def close(self, graceful: bool = True) -> None:
        self._stop.set()
        task = self._task
        if task is None or task.done():
            self.closed = True
            return
        if not graceful:
            task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), 5.0)
        except (TimeoutError, asyncio.CancelledError, Exception):  # noqa: BLE001 - closing must not raise
            task.cancel()


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    """The pool's loop thread: runs until stopped, then ends what is left on it as asyncio.run does.

    A task left pending when the loop stops stays suspended until the garbage collector closes its
    coroutine, in whatever thread happens to collect it; closing one parked in asyncio.Queue.get()
    (the events' drain) while the interpreter exited crashed it with a segmentation fault after every
    test had passed. Cancelled here, each gets to run its own cleanup on its own loop.
    """
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.wait(pending, timeout=5.0))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


class ConnectionPool:
    """Live MCP connections owned by one worker process, on a loop thread of their own."""

    def __init__(self, settings: PoolSettings | None = None, events: PoolEvents | None = None):
        self.settings = settings or PoolSettings()
        self.events = events or PoolEvents()
        self._connections: OrderedDict[ConnectionKey, Connection] = OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._batches: dict[bool, asyncio.Semaphore] = {}
        self._maintenance: concurrent.futures.Future[None] | None = None
        self._background: set[asyncio.Task[Any]] = set()
        self._changes_due: set[ConnectionKey] = set()

    # -- the loop thread -------------------------------------------------------------

    def start(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                # stdio servers' killed grandchildren must be reaped by someone: us (processes.py).
                become_subreaper()
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=_run_loop, args=(loop,), name="mcp-pool", daemon=True)
                self._thread.start()
                self._loop = loop
                self._maintenance = asyncio.run_coroutine_threadsafe(self._maintain_forever(), loop)
            return self._loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.start()

    @property
    def started_loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop if it runs, without starting one (for a worker that is stopping)."""
        return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine on the pool's loop from any other thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Close every connection (stdio process groups included) and stop the loop thread."""
        if self._loop is None:
            return
        if self._maintenance is not None:
            self._maintenance.cancel()
        try:
            self.run(self._close_everything(), timeout)
        except concurrent.futures.TimeoutError:
            log.warning("pool shutdown timed out; some connections may not have closed cleanly")
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
        self._loop = None

    # -- connections (coroutines: run them on the pool loop) ---------------------------

    def __len__(self) -> int:
        return len(self._connections)

    def keys(self) -> list[ConnectionKey]:
        """The keys of the connections that are open now (read from any thread)."""
        for _ in range(10):
            try:
                return [key for key, conn in list(self._connections.items()) if conn.client is not None]
            except RuntimeError:  # the loop moved or added one while this thread copied them: again
                continue
        return []

    async def connection(self, key: ConnectionKey, config: ServerConfig) -> Connection:
        """The live connection for `key`, opened (once, however many callers ask) if needed."""
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            # Same key, same connection shape; per-request settings (timeouts) follow the caller's config.
            conn.config = config
            self._connections.move_to_end(key)
            if conn._ready is not None and not conn._ready.done():
                try:
                    await asyncio.shield(conn._ready)
                except Exception as exc:  # the opening we waited for failed: same diagnosis
                    await asyncio.sleep(0)  # let the opener record it
                    raise ConnectionFailed(conn.open_failure or conn.diagnose(exc)) from exc
            return conn
        conn = Connection(key=key, config=config, on_closed=self._forget, on_tools_changed=self._tools_changed)
        conn.on_server_log = functools.partial(self._server_log, conn)
        self._connections[key] = conn
        await self._evict_over_cap()
        batch = self._batches.setdefault(
            config.is_local,
            asyncio.Semaphore(self.settings.local_batch if config.is_local else self.settings.remote_batch),
        )
        started = time.monotonic()
        await self.events.status(key, config, PENDING, None)
        try:
            async with batch:
                await conn.open()
        except ConnectionFailed as exc:
            self._forget(conn)
            await self.events.status(key, config, status_of(exc.failure), exc.failure)
            raise
        except BaseException:
            self._forget(conn)
            raise
        # Operators (and bench/) count these lines: a warm call must never log one.
        log.info(
            "MCP connection opened: %s (%s) for %s in %.0f ms",
            config.name,
            config.transport,
            key.owner,
            (time.monotonic() - started) * 1000,
        )
        await self.events.status(key, config, CONNECTED, None)
        if conn.negotiated is not None and conn.negotiated != config.negotiated:
            await self.events.negotiated(key, config, conn.negotiated)
        return conn

    def _forget(self, conn: Connection) -> None:
        if conn.key is not None and self._connections.get(conn.key) is conn:
            del self._connections[conn.key]
            # Still listed, so not closed through drop(): it ended by itself after it had opened
            # (the transport failed, three terminal errors). Say so, from the pool loop.
            if conn._ready is not None and conn._ready.done() and not conn._ready.exception():
                cause = conn.ended_by
                failure = conn.diagnose(cause) if cause else Failure("connection_lost", "the connection closed")
                self._spawn(self.events.status(conn.key, conn.config, FAILED, failure))

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:
            coro.close()
            return
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _server_log(self, conn: Connection, level: str, logger: str | None, data: Any) -> None:
        if conn.key is not None:
            await self.events.server_log(conn.key, conn.config, level, logger, data)

    async def _tools_changed(self, conn: Connection) -> None:
        # The connection dropped its cached list at once (the next listing is fresh); the news of it
        # waits for the window to close, so five changes in a burst make one refresh in every page.
        key = conn.key
        if key is None or key in self._changes_due:
            return
        self._changes_due.add(key)

        async def tell() -> None:
            await asyncio.sleep(self.settings.list_changed_seconds)
            self._changes_due.discard(key)
            await self.events.tools_changed(key, conn.config)

        self._spawn(tell())

    async def drop(self, key: ConnectionKey, status: str = CLOSED, failure: Failure | None = None) -> None:
        """Close the connection for `key` and forget its caches; the next use reconnects."""
        conn = self._connections.pop(key, None)
        if conn is not None:
            await conn.close()
            await self.events.status(key, conn.config, status, failure)

    async def _replace(self, key: ConnectionKey, conn: Connection, status: str, failure: Failure | None = None) -> None:
        """Drop `conn` so that the next use opens a new one; never the new one itself, which a request
        beside this one (a page asks for its resources and prompts at once) may have opened already
        on finding the same expired session."""
        if self._connections.get(key) is conn:
            await self.drop(key, status, failure)

    async def _close_everything(self) -> None:
        await self.close_all()
        await self.events.aclose()

    def keys_for(self, server_id: int) -> list[ConnectionKey]:
        """The keys of the live connections to a server (to close those whose credentials changed)."""
        return [key for key in self._connections if key.server_id == server_id]

    async def close_all(self) -> None:
        keys = list(self._connections)
        await asyncio.gather(*(self.drop(key) for key in keys), return_exceptions=True)

    async def _evict_over_cap(self) -> None:
        excess = len(self._connections) - self.settings.max_connections
        for key, conn in list(self._connections.items()):
            if excess <= 0:
                break
            if conn.in_flight == 0 and conn.client is not None:
                excess -= 1
                await self.drop(key)

    async def _maintain_forever(self) -> None:
        """Close idle connections and check the health of the others, on a timer."""
        last_health = time.monotonic()
        while True:
            period = min(30.0, max(self.settings.idle_seconds / 2, 0.5))
            if self.settings.health_seconds > 0:
                period = min(period, self.settings.health_seconds)
            await asyncio.sleep(period)
            try:
                await self.reap_idle()
                if self.settings.health_seconds > 0 and time.monotonic() - last_health >= self.settings.health_seconds:
                    last_health = time.monotonic()
                    await self.check_health()
            except Exception:  # noqa: BLE001 - the timer must keep running
                log.exception("pool maintenance failed")

    async def reap_idle(self) -> int:
        cutoff = time.monotonic() - self.settings.idle_seconds
        idle = [
            key
            for key, conn in self._connections.items()
            if conn.in_flight == 0 and conn.client is not None and conn.last_used < cutoff and not conn.subscribed
        ]
        for key in idle:
            await self.drop(key)
        return len(idle)

    async def check_health(self) -> dict[ConnectionKey, str]:
        """Check every open, unused connection once; three failures in a row close it (status failed)."""
        results: dict[ConnectionKey, str] = {}
        for key, conn in list(self._connections.items()):
            if conn.client is None or conn.in_flight:
                continue
            try:
                await conn.check_health()
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                failure = conn.diagnose(exc)
                # Every failed health check counts, whatever the reason: a server that cannot
                # answer a ping three times in a row is not one to keep a session with.
                conn.terminal_errors += 1
                if conn.terminal_errors >= MAX_CONSECUTIVE_TERMINAL_ERRORS or is_connection_lost(exc):
                    await self.drop(key, FAILED, failure)
                    results[key] = FAILED
                else:
                    results[key] = "unhealthy"
                continue
            was_failing = conn.terminal_errors > 0
            conn.terminal_errors = 0
            results[key] = CONNECTED
            if was_failing:
                await self.events.status(key, conn.config, CONNECTED, None)
        return results

    # -- what callers do --------------------------------------------------------------

    async def use(
        self,
        key: ConnectionKey,
        config: ServerConfig,
        fn: Callable[[Connection], Awaitable[T]],
        *,
        answered: Answered = tool_answer,
        reconnect: bool = True,
    ) -> T:
        """Run `fn` on the live connection for `key`, with Claude Code's recovery around it.

        Every request on a pooled connection comes through here (tool calls and their listing
        through `call_tool`/`list_tools`, the rest through `_request`), so all recover alike:
        an expired session (HTTP 404 with our session id, "Session not found") drops the
        connection and its caches, reconnects and runs `fn` once more; a lost connection is
        dropped; terminal transport errors are counted (three in a row close the connection),
        and anything else the server answers resets the count. `answered` says which JSON-RPC
        errors are the server's answer to the request itself (see `tool_answer`). With
        `reconnect` False an expired session is not retried: the connection is dropped and the
        failure raised, so a caller that must not open a connection never opens one.
        Deadlines are `fn`'s own (an anyio cancel scope: `Connection.request`, `call_tool`).
        Raises ConnectionFailed with the diagnosis.
        """
        retries = MAX_SESSION_RETRIES if reconnect else 0
        for attempt in range(retries + 1):
            conn = await self.connection(key, config)
            conn.in_flight += 1
            try:
                result = await fn(conn)
            except BaseException as exc:
                if isinstance(exc, asyncio.CancelledError):
                    raise
                if isinstance(exc, TaskEnded):
                    conn.record(None)  # the server answered for its task: the connection works
                    raise ConnectionFailed(exc.failure) from exc
                answer = answered(exc) if isinstance(exc, MCPError) else None
                if answer is not None:
                    conn.record(None)  # the server answered: the connection works
                    raise ConnectionFailed(answer) from exc
                if attempt < retries and conn.session_expired(exc):
                    log.info("session with %s expired; reconnecting once", config.name)
                    await self._replace(key, conn, PENDING)
                    continue
                failure = conn.diagnose(exc)
                if is_connection_lost(exc) or conn.session_expired(exc):
                    await self._replace(key, conn, FAILED, failure)
                elif conn.record(exc):
                    await self._replace(key, conn, FAILED, failure)
                raise ConnectionFailed(failure) from exc
            else:
                conn.record(None)
                return result
            finally:
                conn.in_flight -= 1
                conn.last_used = time.monotonic()
        raise AssertionError("unreachable")  # pragma: no cover

    async def list_tools(self, key: ConnectionKey, config: ServerConfig, refresh: bool = False) -> list[dict[str, Any]]:
        return await self.use(key, config, lambda conn: conn.list_tools(refresh))

    async def call_tool(
        self,
        key: ConnectionKey,
        config: ServerConfig,
        tool: str,
        arguments: dict[str, Any],
        on_progress: ProgressSink | None = None,
        hooks: CallHooks | None = None,
        as_task: bool = False,
        resume: dict[str, Any] | None = None,
    ) -> CallOutcome:
        """Call a tool (`as_task`: as an MCP task, where the server runs it so), or follow the task
        of a call begun before (`resume`: its state as `on_task` last had it) to its outcome."""
        started = time.monotonic()
        attempts = 0
        hooks = hooks or CallHooks(on_progress=on_progress)

        async def call(conn: Connection) -> types.CallToolResult:
            nonlocal attempts
            attempts += 1
            if resume is not None:
                return await conn.resume_task(resume, hooks)
            return await conn.call_tool(tool, arguments, hooks, as_task)

        def ended(outcome: CallOutcome) -> CallOutcome:
            outcome.duration_ms = round((time.monotonic() - started) * 1000, 3)
            outcome.retried = attempts > 1
            outcome.exchange = hooks.exchange.as_list()
            return outcome

        try:
            result = await self.use(key, config, call)
        except ConnectionFailed as exc:
            status = CALL_STATUS_OF_FAILURE.get(exc.failure.kind, "failed")
            return ended(CallOutcome(status, failure=exc.failure))
        data = call_result_to_dict(result)
        return ended(CallOutcome("tool_error" if data["isError"] else "succeeded", result=data))

    async def probe(self, config: ServerConfig) -> dict[str, Any]:
        """Test a server on a fresh, unpooled connection: handshake, list tools, close.

        Negotiates afresh (what was remembered is ignored) and reports what it found, so
        the caller can remember it. Raises ConnectionFailed with the diagnosis.
        """
        from dataclasses import replace

        conn = Connection(key=None, config=replace(config, negotiated=None))
        started = time.monotonic()
        await conn.open()
        handshake_ms = (time.monotonic() - started) * 1000
        try:
            info = conn.describe()
            listed = time.monotonic()
            try:
                tools = await conn.list_tools()
            except BaseException as exc:
                raise ConnectionFailed(conn.diagnose(exc)) from exc
            info.update(await self._counts(conn))
            info.update(
                tools=tools,
                tool_count=len(tools),
                handshake_ms=round(handshake_ms, 1),
                round_trip_ms=round((time.monotonic() - listed) * 1000, 1),
                negotiated=conn.negotiated.as_dict() if conn.negotiated else None,
            )
            return info
        finally:
            await conn.close()

    # -- resources, prompts, completions (each one request on the pooled connection) ------

    async def _request(
        self,
        key: ConnectionKey,
        config: ServerConfig,
        work: Callable[[Connection, Client], Awaitable[T]],
        reconnect: bool = True,
    ) -> T:
        """Run `work` on the live connection for `key` as one request: in the connection's turn,
        bounded by the request timeout (`Connection.request`), with `use`'s recovery around it.

        Raises ConnectionFailed with the diagnosis when connecting or the request fails.
        """

        async def one_request(conn: Connection) -> T:
            client = conn.client
            assert client is not None
            try:
                return await conn.request(lambda: work(conn, client))
            except TimeoutError as exc:
                # A wait of its own inside `work` (a subscription's) ran out: the same deadline.
                raise RequestTimedOut(config.request_timeout) from exc

        return await self.use(key, config, one_request, answered=request_answer, reconnect=reconnect)

    async def _counts(self, conn: Connection) -> dict[str, int | None]:
        """How many resources, templates and prompts the server offers (0 for what it does not
        offer; None where listing failed: a test is about connecting, not about these lists)."""
        client = conn.client
        assert client is not None
        caps = self._capabilities(client)
        counts: dict[str, int | None] = {"resource_count": 0, "template_count": 0, "prompt_count": 0}
        lists: list[tuple[str, Callable[[str | None], Awaitable[Any]], str]] = []
        if caps.resources is not None:
            lists.append(
                ("resource_count", lambda c: client.list_resources(cursor=c, cache_mode="bypass"), "resources")
            )
            lists.append(
                (
                    "template_count",
                    lambda c: client.list_resource_templates(cursor=c, cache_mode="bypass"),
                    "resource_templates",
                )
            )
        if caps.prompts is not None:
            lists.append(("prompt_count", lambda c: client.list_prompts(cursor=c, cache_mode="bypass"), "prompts"))
        for name, fetch, items in lists:
            try:
                counts[name] = len(await conn.request(lambda f=fetch, i=items: self._all_pages(f, i)))
            except Exception as exc:  # noqa: BLE001 - the test still reports the connection
                log.debug("counting %s of %s failed: %r", items, conn.config.name, exc)
                counts[name] = None
        return counts

    @staticmethod
    def _capabilities(client: Client) -> types.ServerCapabilities:
        return client.server_capabilities or types.ServerCapabilities()

    @staticmethod
    async def _all_pages(fetch: Callable[[str | None], Awaitable[Any]], items: str) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await fetch(cursor)
            out.extend(listed(getattr(page, items)))
            cursor = page.next_cursor
            if cursor is None:
                break
        return out

    async def list_resources(self, key: ConnectionKey, config: ServerConfig) -> dict[str, Any]:
        """Every resource and resource template (all pages), and what the server offers around them."""

        async def work(conn: Connection, client: Client) -> dict[str, Any]:
            caps = self._capabilities(client)
            if caps.resources is None:
                return {"offered": False, "resources": [], "templates": [], "subscribe": False, "completions": False}
            resources = await self._all_pages(
                lambda cursor: client.list_resources(cursor=cursor, cache_mode="bypass"), "resources"
            )
            templates = await self._all_pages(
                lambda cursor: client.list_resource_templates(cursor=cursor, cache_mode="bypass"), "resource_templates"
            )
            return {
                "offered": True,
                "resources": resources,
                "templates": templates,
                "subscribe": bool(caps.resources.subscribe),
                "completions": caps.completions is not None,
            }

        return await self._request(key, config, work)

    async def read_resource(self, key: ConnectionKey, config: ServerConfig, uri: str) -> dict[str, Any]:
        async def work(conn: Connection, client: Client) -> dict[str, Any]:
            return resource_contents_to_dict(await client.read_resource(uri, cache_mode="bypass"))

        return await self._request(key, config, work)

    async def list_prompts(self, key: ConnectionKey, config: ServerConfig) -> dict[str, Any]:
        async def work(conn: Connection, client: Client) -> dict[str, Any]:
            caps = self._capabilities(client)
            if caps.prompts is None:
                return {"offered": False, "prompts": [], "completions": False}
            prompts = await self._all_pages(
                lambda cursor: client.list_prompts(cursor=cursor, cache_mode="bypass"), "prompts"
            )
            return {"offered": True, "prompts": prompts, "completions": caps.completions is not None}

        return await self._request(key, config, work)

    async def get_prompt(
        self, key: ConnectionKey, config: ServerConfig, name: str, arguments: dict[str, str]
    ) -> dict[str, Any]:
        async def work(conn: Connection, client: Client) -> dict[str, Any]:
            return prompt_to_dict(await client.get_prompt(name, arguments))

        return await self._request(key, config, work)

    async def complete(
        self,
        key: ConnectionKey,
        config: ServerConfig,
        target: dict[str, str],
        argument: str,
        value: str,
        context: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Suggestions for one argument of a prompt (`{"prompt": name}`) or a resource template
        (`{"template": uri_template}`); none if the server offers no completions."""
        ref: types.PromptReference | types.ResourceTemplateReference
        if "prompt" in target:
            ref = types.PromptReference(type="ref/prompt", name=target["prompt"])
        else:
            ref = types.ResourceTemplateReference(type="ref/resource", uri=target["template"])

        async def work(conn: Connection, client: Client) -> dict[str, Any]:
            if self._capabilities(client).completions is None:
                return {"values": [], "total": None, "hasMore": False}
            result = await client.complete(ref, {"name": argument, "value": value}, context_arguments=context or None)
            return completion_to_dict(result)

        return await self._request(key, config, work)

    async def subscribe_resource(
        self, key: ConnectionKey, config: ServerConfig, uri: str, sink: UpdateSink, subscriber: str = ""
    ) -> None:
        """Send news of `uri` to `sink` until `subscriber` unsubscribes or the connection ends ("ended")."""

        async def work(conn: Connection, client: Client) -> None:
            if conn.subscriptions is None:
                conn.subscriptions = ResourceSubscriptions(client, sink)
            await conn.subscriptions.add(uri, subscriber, sink, config.request_timeout)

        await self._request(key, config, work)

    async def unsubscribe_resource(
        self, key: ConnectionKey, config: ServerConfig, uri: str, subscriber: str = ""
    ) -> bool:
        """`subscriber` leaves `uri`; never opens a connection just to say goodbye."""
        conn = self._connections.get(key)
        if conn is None or conn.closed or conn.subscriptions is None:
            return False

        async def work(conn: Connection, client: Client) -> bool:
            assert conn.subscriptions is not None
            return await conn.subscriptions.remove(uri, subscriber, config.request_timeout)

        # An expired session is not retried on a new connection: the server forgot its subscriptions with it.
        return await self._request(key, config, work, reconnect=False)

    async def unsubscribe_everywhere(self, server_id: int, uri: str, subscriber: str) -> bool:
        """`subscriber` (one page's socket) leaves `uri` on every connection to the server.

        Needs neither the server's row nor its credentials: a page closed after its server was
        disabled, deleted or given new credentials still gives its subscriptions back, or the
        connection would keep them (and the server its subscriber) until it closes.
        """
        left = False
        for key in self.keys_for(server_id):
            conn = self._connections.get(key)
            if conn is not None:
                left = await self.unsubscribe_resource(key, conn.config, uri, subscriber) or left
        return left


def status_of(failure: Failure) -> str:
    return NEEDS_AUTH if failure.kind == "needs_auth" else FAILED


__all__ = [
    "CLOSED",
    "CONNECTED",
    "FAILED",
    "MODERN_VERSION",
    "NEEDS_AUTH",
    "PENDING",
    "CallHooks",
    "CallOutcome",
    "Connection",
    "ConnectionPool",
    "MissingVariable",
    "PoolEvents",
    "PoolSettings",
]
