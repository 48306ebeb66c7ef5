"""One small builder per transport kind, chosen from a table by `ServerConfig.transport`.

Every builder gets an already expanded config (sessions/mcp/variables.py). No builder puts
a read timeout on a long-lived stream (the Streamable HTTP GET stream, the SSE stream, the
WebSocket): request deadlines are applied per request by the connection instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import IO, Any

import anyio
import httpx2
import mcp_types
from anyio.streams.text import TextReceiveStream
from mcp.client.sse import sse_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from .config import ServerConfig
from .processes import stop_process_group

MCP_SESSION_HEADER = "mcp-session-id"


@dataclass
class HttpTrace:
    """What the HTTP layer saw. The SDK turns an HTTP 404 into a JSON-RPC error and loses
    the status; a response hook keeps it, so a diagnosis can say "HTTP 404 (wrong path?)",
    and a 404 on a request that carried a session id says the session expired."""

    last_error_status: int | None = None
    session_expired: bool = False

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.last_error_status = response.status_code
            if response.status_code == 404 and MCP_SESSION_HEADER in response.request.headers:
                self.session_expired = True


TransportFactory = Callable[[ServerConfig, IO[str], HttpTrace], AbstractAsyncContextManager[Any]]


# -- stdio -------------------------------------------------------------------------------


@asynccontextmanager
async def stdio_transport(config: ServerConfig, errlog: IO[str], trace: HttpTrace) -> AsyncIterator[Any]:
    """A stdio server in a process group of its own, stopped by the seeds' escalation (processes.py).

    Newline-delimited JSON-RPC over stdin/stdout, like the SDK's stdio_client, whose 4 s
    shutdown this replaces. The child gets the SDK's safe default environment plus `env`.
    """
    process = await anyio.open_process(
        [config.command, *config.args],
        env=get_default_environment() | dict(config.env),
        stderr=errlog,
        cwd=config.cwd or None,
        start_new_session=True,
    )
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def stdout_reader() -> None:
        assert process.stdout is not None
        buffer = ""
        async with read_writer:
            try:
                async for chunk in TextReceiveStream(process.stdout, errors="replace"):
                    lines = (buffer + chunk).split("\n")
                    buffer = lines.pop()
                    for line in lines:
                        if not line.strip():
                            continue
                        try:
                            message: SessionMessage | Exception = SessionMessage(
                                mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                            )
                        except ValueError as exc:
                            message = exc
                        await read_writer.send(message)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError):
                pass  # the process went away or we are shutting down: the session sees the stream end

    async def stdin_writer() -> None:
        assert process.stdin is not None
        async with write_reader:
            try:
                async for message in write_reader:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send((data + "\n").encode())
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                await read_writer.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(stdout_reader)
        tg.start_soon(stdin_writer)
        try:
            yield read_stream, write_stream
        finally:
            # However the connection ends (even cancelled), the process group must not outlive it.
            with anyio.CancelScope(shield=True):
                await write_stream.aclose()
                await stop_process_group(process)
                await read_stream.aclose()
            tg.cancel_scope.cancel()


# -- Streamable HTTP and SSE ------------------------------------------------------------


def _http_client(config: ServerConfig, trace: HttpTrace, headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    # Connect, write and pool waits are bounded; reads are not, since the long-lived GET/SSE
    # stream must stay open. Request deadlines are applied per request by the connection.
    return httpx2.AsyncClient(
        headers=headers if headers is not None else dict(config.headers),
        timeout=httpx2.Timeout(config.connect_timeout, read=None),
        follow_redirects=False,
        event_hooks={"response": [trace.on_response]},
        auth=config.auth,
    )


@asynccontextmanager
async def http_transport(config: ServerConfig, errlog: IO[str], trace: HttpTrace) -> AsyncIterator[Any]:
    async with _http_client(config, trace) as http:
        async with streamable_http_client(config.url, http_client=http) as streams:
            yield streams


def sse_transport(config: ServerConfig, errlog: IO[str], trace: HttpTrace) -> AbstractAsyncContextManager[Any]:
    """The legacy HTTP+SSE transport: a GET event stream plus POSTs to the endpoint it names."""

    def factory(
        headers: dict[str, str] | None = None, timeout: httpx2.Timeout | None = None, auth: httpx2.Auth | None = None
    ) -> httpx2.AsyncClient:
        return _http_client(config, trace, headers)

    return sse_client(
        config.url,
        headers=dict(config.headers),
        timeout=config.connect_timeout,
        sse_read_timeout=None,  # type: ignore[arg-type]  # no deadline on the event stream itself
        httpx_client_factory=factory,
    )


# -- WebSocket --------------------------------------------------------------------------

WEBSOCKET_SUBPROTOCOL = "mcp"
WEBSOCKET_MAX_MESSAGE = 16 * 1024 * 1024


@asynccontextmanager
async def websocket_transport(config: ServerConfig, errlog: IO[str], trace: HttpTrace) -> AsyncIterator[Any]:
    """JSON-RPC messages as WebSocket text frames, subprotocol "mcp" (mcp 2.3.0 ships no client)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    try:
        socket = await connect(
            config.url,
            subprotocols=[WEBSOCKET_SUBPROTOCOL],  # type: ignore[list-item]
            additional_headers=dict(config.headers),
            open_timeout=config.connect_timeout,
            max_size=WEBSOCKET_MAX_MESSAGE,
            ping_interval=20,
            ping_timeout=20,
        )
    except InvalidStatus as exc:
        trace.last_error_status = exc.response.status_code
        raise
    if socket.subprotocol != WEBSOCKET_SUBPROTOCOL:
        await socket.close()
        raise ConnectionError(f"the server did not accept the {WEBSOCKET_SUBPROTOCOL!r} WebSocket subprotocol")

    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def receiver() -> None:
        async with read_writer:
            try:
                async for frame in socket:
                    text = frame if isinstance(frame, str) else frame.decode("utf-8", "replace")
                    try:
                        message: SessionMessage | Exception = SessionMessage(
                            mcp_types.jsonrpc_message_adapter.validate_json(text, by_name=False)
                        )
                    except ValueError as exc:
                        message = exc
                    await read_writer.send(message)
            except (ConnectionClosed, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass

    async def sender() -> None:
        async with write_reader:
            try:
                async for message in write_reader:
                    payload = message.message.model_dump(by_alias=True, mode="json", exclude_unset=True)
                    await socket.send(json.dumps(payload))
            except ConnectionClosed:
                await read_writer.aclose()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(receiver)
            tg.start_soon(sender)
            try:
                yield read_stream, write_stream
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(2.0):
            await socket.close()


TRANSPORT_FACTORIES: dict[str, TransportFactory] = {
    "stdio": stdio_transport,
    "http": http_transport,
    "sse": sse_transport,
    "websocket": websocket_transport,
}


def open_transport(config: ServerConfig, errlog: IO[str], trace: HttpTrace) -> AbstractAsyncContextManager[Any]:
    return TRANSPORT_FACTORIES[config.transport](config, errlog, trace)


def read_tail(errlog: IO[str], limit: int = 4000) -> str:
    """The last `limit` bytes a stdio server wrote to stderr (the child writes to the fd directly)."""
    try:
        fd = errlog.fileno()
        size = os.fstat(fd).st_size
        return os.pread(fd, limit, max(0, size - limit)).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
