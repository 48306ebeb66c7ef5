"""A browser stand-in: logs in through the real login form and calls tools over the playground WebSocket."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import httpx
import websockets

CSRF_FIELD = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class CallFailed(Exception):
    pass


async def login(base_url: str, username: str, password: str) -> str:
    """Post allauth's login form as a browser does; return the session cookie's value."""
    async with httpx.AsyncClient(base_url=base_url, follow_redirects=False, timeout=60) as http:
        page = await http.get("/accounts/login/")
        page.raise_for_status()
        match = CSRF_FIELD.search(page.text)
        if match is None:
            raise RuntimeError("the login page has no CSRF token")
        answer = await http.post(
            "/accounts/login/",
            data={"login": username, "password": password, "csrfmiddlewaretoken": match.group(1)},
            headers={"Referer": f"{base_url}/accounts/login/"},
        )
        session = http.cookies.get("sessionid")
        if answer.status_code != 302 or not session:
            raise RuntimeError(f"login of {username} failed: HTTP {answer.status_code}")
        return session


class Playground:
    """One logged-in playground WebSocket; one call at a time, like a person at the keyboard."""

    def __init__(self, base_url: str, session: str):
        self.base_url = base_url
        self.session = session
        self.ws: Any = None
        self._refs = 0

    async def __aenter__(self) -> Playground:
        ws_url = self.base_url.replace("http://", "ws://", 1) + "/ws/playground/"
        self.ws = await websockets.connect(
            ws_url,
            additional_headers={"Cookie": f"sessionid={self.session}"},
            origin=self.base_url,
            max_size=None,  # large results arrive as one frame
            open_timeout=30,
            compression=None,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.ws.close()

    async def call(self, server: int, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """Send one call; return its call.ended event and the seconds from send to that event."""
        self._refs += 1
        ref = f"b{self._refs}"
        message = json.dumps({"type": "call", "ref": ref, "server": server, "tool": tool, "arguments": arguments})
        started = time.perf_counter()
        await self.ws.send(message)
        call_id = None
        while True:
            event = json.loads(await self.ws.recv())
            kind = event.get("type")
            if kind == "call.accepted" and event.get("ref") == ref:
                call_id = event["call"]
            elif kind == "call.ended" and call_id is not None and event.get("call") == call_id:
                return event, time.perf_counter() - started
            elif kind == "error" and event.get("ref") == ref:
                raise CallFailed(event.get("message", "error"))
