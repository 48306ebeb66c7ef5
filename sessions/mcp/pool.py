"""The worker-side connection pool: live MCP sessions on one asyncio loop thread.

Each worker process owns one pool. A connection is memoized by `ConnectionKey`
(server, config fingerprint, credential owner) and reused across calls and tasks;
its tool list is cached until the server says it changed or a caller asks to refresh.
The SDK requires a client to be entered and exited in the same task, so each
connection lives inside one long-running task and calls reach it from other tasks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mcp import Client, types

from .config import ConnectionKey, ServerConfig
from .errors import ConnectionFailed, Failure, diagnose, is_connection_lost
from .results import call_result_to_dict, dump, tool_to_dict
from .transports import HttpTrace, open_transport, read_tail

log = logging.getLogger(__name__)
T = TypeVar("T")

CLIENT_INFO = types.Implementation(name="mcp-portal", version="0.1.0")
MAX_LIST_PAGES = 100  # a server that hands out cursors forever must not hang the worker
ProgressSink = Callable[[float, float | None, str | None], Awaitable[None]]


@dataclass
class PoolSettings:
    max_connections: int = 200
    idle_seconds: float = 600.0
    local_batch: int = 3
    remote_batch: int = 20
    close_timeout: float = 5.0


@dataclass
class CallOutcome:
    """How one tool call ended: succeeded, tool_error, failed, timed_out or rejected."""

    status: str
    result: dict[str, Any] | None = None
    failure: Failure | None = None
    duration_ms: float = 0.0
    errors: list[dict[str, Any]] = field(default_factory=list)  # per-field argument errors


@dataclass
class Connection:
    key: ConnectionKey | None
    config: ServerConfig
    on_closed: Callable[[Connection], None] = lambda _conn: None
    client: Client | None = None
    tools: list[dict[str, Any]] | None = None
    in_flight: int = 0
    last_used: float = field(default_factory=time.monotonic)
    closed: bool = False
    _ready: asyncio.Future[None] | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _errlog: Any = None
    _last_stderr: str = ""
    http: HttpTrace = field(default_factory=HttpTrace)

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
            # A connection that never came up has nothing to shut down gracefully.
            await self.close(graceful=False)
            raise ConnectionFailed(failure) from exc

    async def _live(self) -> None:
        assert self._ready is not None
        try:
            client = Client(
                open_transport(self.config, self._errlog, self.http),
                mode="auto",
                client_info=CLIENT_INFO,
                message_handler=self._on_message,
                cache=None,  # the pool caches lists itself, per connection
            )
            async with client:
                self.client = client
                self._ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - every way out must release the waiters
            if not self._ready.done():
                self._ready.set_exception(exc)
            elif not isinstance(exc, asyncio.CancelledError):
                log.info("connection to %s ended: %r", self.config.name, exc)
        finally:
            self.closed = True
            self.client = None
            self.on_closed(self)
            if self._errlog is not None:
                self._last_stderr = self.stderr_tail()
                self._errlog.close()

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.tools = None

    def diagnose(self, exc: BaseException) -> Failure:
        return diagnose(exc, self.config, self.stderr_tail(), self.http.last_error_status)

    def stderr_tail(self) -> str:
        if self._errlog is None or self._errlog.closed or self.config.transport != "stdio":
            return self._last_stderr
        return read_tail(self._errlog)

    def describe(self) -> dict[str, Any]:
        client = self.client
        assert client is not None
        info = client.server_info
        return {
            "server_name": info.name if info else "",
            "server_version": info.version if info else "",
            "protocol_version": client.protocol_version,
            "capabilities": dump(client.server_capabilities),
            "instructions": client.instructions or "",
        }

    async def list_tools(self, refresh: bool = False) -> list[dict[str, Any]]:
        if self.tools is not None and not refresh:
            return self.tools
        assert self.client is not None
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await asyncio.wait_for(
                self.client.list_tools(cursor=cursor, cache_mode="refresh"), self.config.request_timeout
            )
            tools.extend(tool_to_dict(tool) for tool in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self.tools = tools
        return tools

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


class ConnectionPool:
    """Live MCP connections owned by one worker process, on a loop thread of their own."""

    def __init__(self, settings: PoolSettings | None = None):
        self.settings = settings or PoolSettings()
        self._connections: OrderedDict[ConnectionKey, Connection] = OrderedDict()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._batches: dict[bool, asyncio.Semaphore] = {}
        self._reaper: concurrent.futures.Future[None] | None = None

    # -- the loop thread -------------------------------------------------------------

    def start(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                self._thread = threading.Thread(target=loop.run_forever, name="mcp-pool", daemon=True)
                self._thread.start()
                self._loop = loop
                self._reaper = asyncio.run_coroutine_threadsafe(self._reap_idle_forever(), loop)
            return self._loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Run a coroutine on the pool's loop from any other thread."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Close every connection (stdio children included) and stop the loop thread."""
        if self._loop is None:
            return
        if self._reaper is not None:
            self._reaper.cancel()
        try:
            self.run(self.close_all(), timeout)
        except concurrent.futures.TimeoutError:
            log.warning("pool shutdown timed out; some connections may not have closed cleanly")
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(timeout)
        self._loop = None

    # -- connections (coroutines: run them on the pool loop) ---------------------------

    def __len__(self) -> int:
        return len(self._connections)

    async def connection(self, key: ConnectionKey, config: ServerConfig) -> Connection:
        """The live connection for `key`, opened (once, however many callers ask) if needed."""
        conn = self._connections.get(key)
        if conn is not None and not conn.closed:
            self._connections.move_to_end(key)
            if conn._ready is not None and not conn._ready.done():
                await asyncio.shield(conn._ready)
            return conn
        conn = Connection(key=key, config=config, on_closed=self._forget)
        self._connections[key] = conn
        await self._evict_over_cap()
        batch = self._batches.setdefault(
            config.is_local,
            asyncio.Semaphore(self.settings.local_batch if config.is_local else self.settings.remote_batch),
        )
        try:
            async with batch:
                await conn.open()
        except BaseException:
            self._forget(conn)
            raise
        return conn

    def _forget(self, conn: Connection) -> None:
        if conn.key is not None and self._connections.get(conn.key) is conn:
            del self._connections[conn.key]

    async def drop(self, key: ConnectionKey) -> None:
        conn = self._connections.pop(key, None)
        if conn is not None:
            await conn.close()

    def keys_for(self, server_id: int) -> list[ConnectionKey]:
        """The keys of the live connections to a server (to close those whose credentials changed)."""
        return [key for key in self._connections if key.server_id == server_id]

    async def close_all(self) -> None:
        conns = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(conn.close() for conn in conns), return_exceptions=True)

    async def _evict_over_cap(self) -> None:
        excess = len(self._connections) - self.settings.max_connections
        for key, conn in list(self._connections.items()):
            if excess <= 0:
                break
            if conn.in_flight == 0 and conn.client is not None:
                excess -= 1
                await self.drop(key)

    async def _reap_idle_forever(self) -> None:
        while True:
            await asyncio.sleep(min(30.0, max(self.settings.idle_seconds / 2, 0.5)))
            await self.reap_idle()

    async def reap_idle(self) -> int:
        cutoff = time.monotonic() - self.settings.idle_seconds
        idle = [
            key
            for key, conn in self._connections.items()
            if conn.in_flight == 0 and conn.client is not None and conn.last_used < cutoff
        ]
        for key in idle:
            await self.drop(key)
        return len(idle)

    # -- what callers do --------------------------------------------------------------

    async def list_tools(self, key: ConnectionKey, config: ServerConfig, refresh: bool = False) -> list[dict[str, Any]]:
        conn = await self.connection(key, config)
        conn.in_flight += 1
        try:
            return await conn.list_tools(refresh)
        except BaseException as exc:
            if is_connection_lost(exc):
                await self.drop(key)
            raise ConnectionFailed(conn.diagnose(exc)) from exc
        finally:
            conn.in_flight -= 1
            conn.last_used = time.monotonic()

    async def call_tool(
        self,
        key: ConnectionKey,
        config: ServerConfig,
        tool: str,
        arguments: dict[str, Any],
        on_progress: ProgressSink | None = None,
    ) -> CallOutcome:
        started = time.monotonic()

        def ended(outcome: CallOutcome) -> CallOutcome:
            outcome.duration_ms = round((time.monotonic() - started) * 1000, 3)
            return outcome

        try:
            conn = await self.connection(key, config)
        except ConnectionFailed as exc:
            return ended(CallOutcome("failed", failure=exc.failure))
        assert conn.client is not None
        conn.in_flight += 1
        try:
            result = await asyncio.wait_for(
                conn.client.call_tool(
                    tool,
                    arguments,
                    read_timeout_seconds=config.request_timeout,
                    progress_callback=on_progress,
                ),
                # The SDK's own request timeout answers first; this is the backstop for a
                # transport that stops delivering anything at all.
                config.request_timeout + 5.0,
            )
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError):
                raise
            failure = conn.diagnose(exc)
            if failure.kind == "timeout":
                failure.message = f"no answer from the server within {config.request_timeout:g} s"
            if is_connection_lost(exc):
                await self.drop(key)
            status = "timed_out" if failure.kind == "timeout" else "failed"
            return ended(CallOutcome(status, failure=failure))
        finally:
            conn.in_flight -= 1
            conn.last_used = time.monotonic()
        data = call_result_to_dict(result)
        return ended(CallOutcome("tool_error" if data["isError"] else "succeeded", result=data))

    async def probe(self, config: ServerConfig) -> dict[str, Any]:
        """Test a server on a fresh, unpooled connection: handshake, list tools, close.

        Raises ConnectionFailed with the diagnosis when any step fails.
        """
        conn = Connection(key=None, config=config)
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
            info.update(
                tools=tools,
                tool_count=len(tools),
                handshake_ms=round(handshake_ms, 1),
                round_trip_ms=round((time.monotonic() - listed) * 1000, 1),
            )
            return info
        finally:
            await conn.close()
