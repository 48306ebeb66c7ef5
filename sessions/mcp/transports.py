"""One small builder per transport kind, chosen from a table by `ServerConfig.transport`."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import IO, Any

import httpx2
from mcp import StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

from .config import ServerConfig


@dataclass
class HttpTrace:
    """What the HTTP layer saw. The SDK turns an HTTP 404 into a JSON-RPC error and loses
    the status; a response hook keeps it, so a diagnosis can say "HTTP 404 (wrong path?)"."""

    last_error_status: int | None = None

    async def on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400:
            self.last_error_status = response.status_code


TransportFactory = Callable[[ServerConfig, IO[str], HttpTrace], AbstractAsyncContextManager[Any]]


def _stdio(config: ServerConfig, errlog: IO[str], trace: HttpTrace) -> AbstractAsyncContextManager[Any]:
    params = StdioServerParameters(
        command=config.command,
        args=list(config.args),
        env=dict(config.env) or None,
        cwd=config.cwd or None,
    )
    return stdio_client(params, errlog=errlog)


@asynccontextmanager
async def _http(config: ServerConfig, errlog: IO[str], trace: HttpTrace) -> AsyncIterator[Any]:
    # Connect, write and pool waits are bounded; the read timeout is not, since the
    # long-lived GET/SSE stream must stay open. Request timeouts are applied per call.
    timeout = httpx2.Timeout(config.connect_timeout, read=None)
    async with httpx2.AsyncClient(
        headers=dict(config.headers),
        timeout=timeout,
        follow_redirects=False,
        event_hooks={"response": [trace.on_response]},
        auth=config.auth,
    ) as http:
        async with streamable_http_client(config.url, http_client=http) as streams:
            yield streams


TRANSPORT_FACTORIES: dict[str, TransportFactory] = {
    "stdio": _stdio,
    "http": _http,
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
