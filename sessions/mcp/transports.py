"""One small builder per transport kind, chosen from a table by `ServerConfig.transport`.

Every builder gets an already expanded config (sessions/mcp/variables.py). No builder puts
a read timeout on a long-lived stream (the Streamable HTTP GET stream, the SSE stream, the
WebSocket): request deadlines are applied per request by the connection instead.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import IO, Any

import anyio
import httpcore2
import httpx2
import mcp_types
from anyio.streams.text import TextReceiveStream
from mcp.client.sse import sse_client
from mcp.client.stdio import get_default_environment
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from .commands import check_command, check_env, find_executable
from .config import ServerConfig
from .processes import stop_process_group
from .sandbox import NotInSandbox, probe
from .ssrf import AddressRefused, NetworkPolicy, check_address, default_port, resolve

MCP_SESSION_HEADER = "mcp-session-id"


@dataclass
class HttpTrace:
    """What the HTTP layer saw. The SDK turns an HTTP 404 into a JSON-RPC error and loses
    the status; a response hook keeps it, so a diagnosis can say "HTTP 404 (wrong path?)",
    and a 404 on a request that carried a session id says the session expired."""

    last_error_status: int | None = None
    session_expired: bool = False
    redirect: str | None = None  # where a 3xx answer pointed: never followed, but named in the diagnosis

    async def on_response(self, response: httpx2.Response) -> None:
        if 300 <= response.status_code < 400:
            self.last_error_status = response.status_code
            self.redirect = response.headers.get("location", "")
        elif response.status_code >= 400:
            self.last_error_status = response.status_code
            if response.status_code == 404 and MCP_SESSION_HEADER in response.request.headers:
                self.session_expired = True


TransportFactory = Callable[[ServerConfig, IO[str], HttpTrace], AbstractAsyncContextManager[Any]]


# -- stdio -------------------------------------------------------------------------------


@asynccontextmanager
async def stdio_transport(config: ServerConfig, errlog: IO[str], trace: HttpTrace) -> AsyncIterator[Any]:
    """A stdio server in a process group of its own, stopped by Claude Code's escalation (processes.py).

    Newline-delimited JSON-RPC over stdin/stdout, like the SDK's stdio_client, whose 4 s
    shutdown this replaces. Before anything starts: the env may not set names that change how
    a program starts (commands.check_env), and the command must fit the operator's list
    (commands.check_command), as the portal's own PATH finds it. The child gets the SDK's minimal
    environment (HOME, LOGNAME, PATH, SHELL, TERM, USER) plus `env`: none of the portal's own
    secrets. With a sandbox policy (every server the portal starts, unless the operator turned it
    off) the process started is bwrap, which starts the command inside (sandbox.py); bwrap leads
    the process group the escalation signals.
    """
    check_env(config.env)
    base = get_default_environment()
    path = base.get("PATH")
    check_command(config.command, config.args, config.allowed_commands, path, config.cwd)
    executable = find_executable(config.command, path, config.cwd)
    if executable is None or (config.cwd and not os.path.isdir(config.cwd)):
        raise FileNotFoundError(errno.ENOENT, "not found", config.command)
    sandbox = config.sandbox
    if sandbox is None:
        argv, env, cwd = [executable, *config.args], base | dict(config.env), config.cwd or None
    else:
        await anyio.to_thread.run_sync(probe, sandbox)
        for what, shown in (("command", executable), ("working directory", config.cwd)):
            if shown and not sandbox.shows(shown):
                raise NotInSandbox(what, shown)
        # No cwd: the worker's own, as an unsandboxed child would have it, if the sandbox shows it.
        inside = config.cwd or (os.getcwd() if sandbox.shows(os.getcwd()) else None)
        argv = sandbox.argv([executable, *config.args], inside)
        env, cwd = sandbox.environment(base, dict(config.env)), None
    process = await anyio.open_process(argv, env=env, stderr=errlog, cwd=cwd, start_new_session=True)
    read_writer, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, write_reader = anyio.create_memory_object_stream[SessionMessage](0)

    async def stdout_reader() -> None:
        assert process.stdout is not None
        # The pieces of a line not yet ended. Kept as a list and joined once the line ends: adding
        # each 64 KB chunk to a string would copy a 50 MB answer hundreds of times over.
        pending: list[str] = []
        async with read_writer:
            try:
                async for chunk in TextReceiveStream(process.stdout, errors="replace"):
                    if "\n" not in chunk:
                        pending.append(chunk)
                        continue
                    first, *rest = chunk.split("\n")
                    lines = ["".join([*pending, first]), *rest[:-1]]
                    pending = [rest[-1]] if rest[-1] else []
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


class CheckedNetwork(httpcore2.AsyncNetworkBackend):
    """httpcore's network backend with the SSRF policy in front: the name is resolved here, each
    address checked, and the connection made to a checked address (never to the name again).
    The address actually reached is checked once more."""

    def __init__(self, policy: NetworkPolicy, inner: httpcore2.AsyncNetworkBackend):
        self.policy = policy
        self.inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore2.AsyncNetworkStream:
        with anyio.fail_after(timeout):
            addresses = await resolve(host, port, self.policy)
        error: Exception | None = None
        for address in addresses:
            try:
                stream = await self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore2.ConnectError as exc:
                error = exc
                continue
            peer = stream.get_extra_info("server_addr")
            try:
                if peer:
                    check_address(host, str(peer[0]), self.policy)
            except AddressRefused:
                await stream.aclose()
                raise
            return stream
        assert error is not None
        raise error

    async def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        raise AddressRefused(path, "-", "a Unix socket")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every connection (each verifies against the same CA bundle): building
    one loads the bundle, ≈ 50 ms of CPU, which every connection's open used to pay."""
    return httpx2.create_ssl_context()


def _checked_transport(config: ServerConfig) -> httpx2.AsyncHTTPTransport:
    # No proxy from the environment: the check must be on the address the portal itself reaches.
    transport = httpx2.AsyncHTTPTransport(trust_env=False, verify=_tls())
    pool = transport._pool  # httpx takes no network backend; its pool does (a plain attribute)
    pool._network_backend = CheckedNetwork(config.network, pool._network_backend)  # type: ignore[attr-defined]
    return transport


def _http_client(config: ServerConfig, trace: HttpTrace, headers: dict[str, str] | None = None) -> httpx2.AsyncClient:
    # Connect, write and pool waits are bounded; reads are not, since the long-lived GET/SSE
    # stream must stay open. Request deadlines are applied per request by the connection.
    # Redirects are not followed: a 3xx ends the connection, and the diagnosis names where it pointed.
    return httpx2.AsyncClient(
        headers=headers if headers is not None else dict(config.headers),
        timeout=httpx2.Timeout(config.connect_timeout, read=None),
        follow_redirects=False,
        event_hooks={"response": [trace.on_response]},
        auth=config.auth,
        transport=_checked_transport(config),
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


def _connect_without_redirects() -> Any:
    from websockets.asyncio.client import connect

    class connect_without_redirects(connect):  # noqa: N801 - used like websockets' connect
        """websockets follows up to 10 redirects by itself; the portal follows none (a 3xx is raised)."""

        def process_redirect(self, exc: Exception) -> Exception | str:
            return exc

    return connect_without_redirects


@asynccontextmanager
async def websocket_transport(config: ServerConfig, errlog: IO[str], trace: HttpTrace) -> AsyncIterator[Any]:
    """JSON-RPC messages as WebSocket text frames, subprotocol "mcp" (mcp 2.3.0 ships no client)."""
    from urllib.parse import urlsplit

    from websockets.exceptions import ConnectionClosed, InvalidStatus

    connect = _connect_without_redirects()

    parts = urlsplit(config.url)
    host, port = parts.hostname or "", parts.port or default_port(parts.scheme)
    with anyio.fail_after(config.connect_timeout):
        addresses = await resolve(host, port, config.network)
    socket = None
    for index, address in enumerate(addresses):
        try:
            # To the checked address, with the name kept for the Host header and TLS (from the URL);
            # no proxy from the environment, so the check is on the peer actually reached.
            socket = await connect(
                config.url,
                host=address,
                port=port,
                proxy=None,
                subprotocols=[WEBSOCKET_SUBPROTOCOL],  # type: ignore[list-item]
                additional_headers=dict(config.headers),
                open_timeout=config.connect_timeout,
                max_size=WEBSOCKET_MAX_MESSAGE,
                ping_interval=20,
                ping_timeout=20,
            )
            break
        except InvalidStatus as exc:
            trace.last_error_status = exc.response.status_code
            if 300 <= exc.response.status_code < 400:
                trace.redirect = exc.response.headers.get("Location", "")
            raise
        except OSError:
            if index == len(addresses) - 1:
                raise
    assert socket is not None
    peer = socket.transport.get_extra_info("peername")
    if peer:
        try:
            check_address(host, str(peer[0]), config.network)
        except AddressRefused:
            await socket.close()
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
