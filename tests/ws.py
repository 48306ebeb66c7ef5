"""A logged-in playground WebSocket for tests, through the real ASGI application; run() for a test's async
scenario, call() for one call as a person."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from typing import Any, TypeVar

from channels.testing import WebsocketCommunicator
from django.test import Client

ORIGIN = b"http://127.0.0.1:8000"
HOST = b"127.0.0.1:8000"  # the page's own origin is ORIGIN: the Origin check compares scheme, host and port
T = TypeVar("T")


def session_cookie(user) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


def run(scenario: Coroutine[Any, Any, T]) -> T:
    """Run a test's async scenario (the socket's side of it) to its end in a new event loop; what it returns."""
    return asyncio.run(scenario)


def call(user, server, tool: str, **arguments) -> dict[str, Any]:
    """One call of `tool` on `server` as `user`, through a playground socket of their own; its call.ended event."""
    cookie = session_cookie(user)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(server.pk, tool, arguments)

    return asyncio.run(scenario())


class Playground:
    """Use as `async with Playground(cookie) as ws:`; build the cookie with session_cookie() outside async code."""

    def __init__(self, cookie: bytes | None, origin: bytes = ORIGIN, host: bytes = HOST):
        from portal.asgi import application

        headers = [(b"origin", origin), (b"host", host)]
        if cookie:
            headers.append((b"cookie", cookie))
        self.communicator = WebsocketCommunicator(application, "/ws/playground/", headers=headers)
        self.connected = False
        self.close_code: int | None = None
        self.seen: list[dict[str, Any]] = []

    async def __aenter__(self) -> Playground:
        self.connected, self.close_code = await self.communicator.connect(timeout=10)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.communicator.disconnect()

    async def send(self, message: Any) -> None:
        if isinstance(message, str):
            await self.communicator.send_to(text_data=message)
        else:
            await self.communicator.send_json_to(message)

    async def receive(self, timeout: float = 20) -> dict[str, Any]:
        event = json.loads(await self.communicator.receive_from(timeout=timeout))
        self.seen.append(event)
        return event

    async def until(self, type_: str, timeout: float = 30, **match: Any) -> dict[str, Any]:
        """Read events until one has this type and these fields."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TimeoutError(f"no {type_} {match} event; saw {[e.get('type') for e in self.seen]}")
            event = await self.receive(timeout=left)
            if event.get("type") == type_ and all(event.get(k) == v for k, v in match.items()):
                return event

    async def until_any(self, types: set[str], timeout: float = 30, **match: Any) -> dict[str, Any]:
        """Read events until one has one of these types and these fields."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TimeoutError(f"no {types} {match} event; saw {[e.get('type') for e in self.seen]}")
            event = await self.receive(timeout=left)
            if event.get("type") in types and all(event.get(k) == v for k, v in match.items()):
                return event

    async def start(
        self,
        server: int,
        tool: str,
        arguments: dict | None = None,
        timeout: float = 30,
        request_id: str | None = None,
    ) -> dict[str, Any]:
        """Start a call and return its call.accepted event, without waiting for its end.

        `request_id` names the intent, as the page does: the same one again gets the first call back."""
        ref = f"r{len(self.seen)}"
        message = {"type": "call", "ref": ref, "server": server, "tool": tool, "arguments": arguments or {}}
        if request_id is not None:
            message["request_id"] = request_id
        await self.send(message)
        return await self.until("call.accepted", ref=ref, timeout=timeout)

    async def calls_in_flight(self, timeout: float = 30) -> list[dict[str, Any]]:
        """What a page hears on connect: the person's calls not yet ended, with progress and open forms."""
        ref = f"l{len(self.seen)}"
        await self.send({"type": "list_calls", "ref": ref})
        return (await self.until("calls", ref=ref, timeout=timeout))["calls"]

    async def answer_form(self, requested: dict[str, Any], content: dict | None = None, action: str = "accept") -> None:
        """Answer an elicitation.requested event (a form) as a person filling it in would."""
        message = {"type": "answer_elicitation", "elicitation": requested["elicitation"], "action": action}
        if content is not None:
            message["content"] = content
        await self.send(message)

    async def cancel(self, call: str) -> dict[str, Any]:
        await self.send({"type": "cancel_call", "ref": f"cancel:{call}", "call": call})
        return await self.until("cancel.sent", call=call)

    async def server_log(self, server: int, timeout: float = 30) -> list[dict[str, Any]]:
        """The server page's question: what the person's connection logged outside any call."""
        await self.send({"type": "list_server_log", "server": server, "ref": "server-log"})
        return (await self.until("server.logs", server=server, timeout=timeout))["lines"]

    async def call(
        self, server: int, tool: str, arguments: dict | None = None, timeout: float = 30, approve: str | None = None
    ) -> dict[str, Any]:
        """Start a call and return its call.ended event (with the earlier events in .seen).

        With `approve` ("allow_once", "always_allow" or "deny"), first wait for the call's
        approval request and answer it so.
        """
        accepted = await self.start(server, tool, arguments, timeout)
        if approve:
            await self.answer(await self.until("approval.requested", call=accepted["call"], timeout=timeout), approve)
        return await self.until("call.ended", call=accepted["call"], timeout=timeout)

    async def answer(self, requested: dict[str, Any], answer: str) -> None:
        await self.send({"type": "answer_approval", "approval": requested["approval"], "answer": answer})
