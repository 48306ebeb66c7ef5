"""Each call's JSON-RPC messages as they pass on its connection, with times: the raw view of a call.

The transport's two streams are tapped (`tapped`), so what is kept is what went over the wire:
the call's requests and their answers, the server's requests during it (elicitation, sampling,
roots) and the portal's answers, and the notifications (progress, log messages, cancellation).
The tap only appends the message object and a time; turning them into JSON happens once, when
the call ends (`Exchange.as_list`), and keeps at most MAX_MESSAGES of MAX_MESSAGE_CHARS each.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError, JSONRPCResponse

MAX_MESSAGES = 200
MAX_MESSAGE_CHARS = 16_000
MAX_EXCHANGE_CHARS = 256_000  # all of them: the record stays small whatever the server sends
# The tools/call answer's result is the call's own recorded result: kept once, on the record.
RESULT_REF = {"$ref": "result"}


@dataclass
class Exchange:
    """The messages of one call: (monotonic time, "sent" or "received", the JSON-RPC message)."""

    started: float = field(default_factory=time.monotonic)
    messages: list[tuple[float, str, Any]] = field(default_factory=list)
    omitted: int = 0
    call_id: Any = None  # the JSON-RPC id of the tools/call request, whose answer is the result

    def add(self, direction: str, message: Any) -> None:
        # Answers always: there are no more of them than requests, and the call's own ends the view.
        if len(self.messages) < MAX_MESSAGES or isinstance(message, (JSONRPCResponse, JSONRPCError)):
            self.messages.append((time.monotonic(), direction, message))
        else:
            self.omitted += 1

    def as_list(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        budget = MAX_EXCHANGE_CHARS
        for at, direction, message in self.messages:
            if isinstance(message, JSONRPCResponse) and message.id == self.call_id:
                # Not dumped: a 50 MB answer would be copied only to be replaced.
                data: dict[str, Any] = {"jsonrpc": "2.0", "id": message.id, "result": RESULT_REF}
            else:
                data = message.model_dump(mode="json", by_alias=True, exclude_none=True)
                size = len(json.dumps(data, default=str))
                if size > min(MAX_MESSAGE_CHARS, budget):
                    data = {k: data[k] for k in ("jsonrpc", "id", "method") if k in data}
                    data["omitted"] = f"{size} characters, more than the portal keeps of one message"
                    size = 0
                budget -= size
            out.append({"at_ms": round((at - self.started) * 1000, 1), "direction": direction, "message": data})
        if self.omitted:
            out.append({"at_ms": None, "direction": "portal", "message": {"omitted": self.omitted}})
        return out


class Wire:
    """Routes each message to the call it belongs to.

    A request the portal sends belongs to the call its task serves (`sending`); its answer, its
    progress and its cancellation follow it by id and progress token. What the server starts (its
    requests, log messages) belongs to the call it is serving (`serving`), and the portal's answer
    to such a request follows the request's id.
    """

    def __init__(self, sending: Callable[[], Exchange | None], serving: Callable[[], Exchange | None]):
        self._sending, self._serving = sending, serving
        self._ours: dict[Any, Exchange] = {}  # our requests in flight, by id
        self._theirs: dict[Any, Exchange] = {}  # the server's requests in flight, by id
        self._tokens: dict[Any, Exchange] = {}

    def sent(self, message: Any) -> None:
        root = message.message
        method, rid = getattr(root, "method", None), getattr(root, "id", None)
        params = getattr(root, "params", None) or {}
        if method is not None and rid is not None:
            exchange = self._sending()
            if exchange is None:
                return
            self._ours[rid] = exchange
            token = (params.get("_meta") or {}).get("progressToken")
            if token is not None:
                self._tokens[token] = exchange
            if method == "tools/call":
                exchange.call_id = rid  # the last one's answer ends the call (2026: after input rounds)
        elif method is None:
            exchange = self._theirs.pop(rid, None)
        elif method == "notifications/cancelled":
            exchange = self._ours.get(params.get("requestId")) or self._sending()
        else:
            exchange = self._sending()
        if exchange is not None:
            exchange.add("sent", root)

    def received(self, message: Any) -> None:
        root = message.message
        method, rid = getattr(root, "method", None), getattr(root, "id", None)
        if method is None:
            exchange = self._ours.pop(rid, None)
        elif method == "notifications/progress":
            exchange = self._tokens.get((getattr(root, "params", None) or {}).get("progressToken"))
        else:
            exchange = self._serving()
            if exchange is not None and rid is not None:
                self._theirs[rid] = exchange
        if exchange is not None:
            exchange.add("received", root)

    def forget(self, exchange: Exchange) -> None:
        """The call ended: drop what still points at it (requests never answered, its tokens)."""
        for table in (self._ours, self._theirs, self._tokens):
            for key in [k for k, v in table.items() if v is exchange]:
                del table[key]


class _TappedRead:
    def __init__(self, inner: Any, wire: Wire):
        self._inner, self._wire = inner, wire

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)  # `last_context` and the like

    async def receive(self) -> Any:
        item = await self._inner.receive()
        if isinstance(item, SessionMessage):
            self._wire.received(item)
        return item

    def __aiter__(self) -> _TappedRead:
        return self

    async def __anext__(self) -> Any:
        item = await self._inner.__anext__()
        if isinstance(item, SessionMessage):
            self._wire.received(item)
        return item

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _TappedRead:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


class _TappedWrite:
    def __init__(self, inner: Any, wire: Wire):
        self._inner, self._wire = inner, wire

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def send(self, item: Any, /) -> None:
        if isinstance(item, SessionMessage):
            self._wire.sent(item)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> _TappedWrite:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)


@contextlib.asynccontextmanager
async def tapped(transport: contextlib.AbstractAsyncContextManager[Any], wire: Wire) -> AsyncIterator[Any]:
    """The transport's (read, write) streams, each message seen by `wire` on its way."""
    async with transport as streams:
        read, write = streams[0], streams[1]
        yield (_TappedRead(read, wire), _TappedWrite(write, wire), *streams[2:])
