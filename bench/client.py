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


async def call_on_fresh_socket(
    base_url: str, session: str, server: int, tool: str, arguments: dict[str, Any], timeout: float = 60
) -> dict[str, Any]:
    """One call on a socket of its own, as a page that was reloaded: its call.ended event.

    Raises CallFailed for an `error` answer, and the socket's own errors (or TimeoutError) when the
    portal could not be reached or did not answer in time.
    """
    import asyncio

    async with Playground(base_url, session) as page:
        async with asyncio.timeout(timeout):
            event, _ = await page.call(server, tool, arguments)
    return event


def lost_records(database_url: str) -> dict[str, Any]:
    """What the portal's database says about every call: how many, how they ended, what was lost.

    Lost: a call not ended (pending, running), or ended without exactly one audit row for its end.
    """
    import psycopg

    with psycopg.connect(database_url) as conn:
        statuses = dict(conn.execute("SELECT status, count(*) FROM mcp_sessions_toolcall GROUP BY status").fetchall())
        kinds = dict(
            conn.execute(
                "SELECT error_kind, count(*) FROM mcp_sessions_toolcall WHERE error_kind <> '' GROUP BY error_kind"
            ).fetchall()
        )
        unended = conn.execute(
            "SELECT count(*) FROM mcp_sessions_toolcall WHERE status IN ('pending', 'running')"
        ).fetchone()[0]
        unaudited = conn.execute(
            """SELECT count(*) FROM mcp_sessions_toolcall t
               WHERE t.status NOT IN ('pending', 'running', 'awaiting_approval')
               AND (SELECT count(*) FROM mcp_sessions_auditevent a WHERE a.call_id = t.id AND a.kind = 'call') <> 1"""
        ).fetchone()[0]
        unended_rows = [
            [str(value) for value in row]
            for row in conn.execute(
                "SELECT id, tool, status, worker, created_at, started_at FROM mcp_sessions_toolcall "
                "WHERE status IN ('pending', 'running') LIMIT 10"
            ).fetchall()
        ]
        examples = dict(
            conn.execute(
                "SELECT DISTINCT ON (error_kind) error_kind, left(error, 200) FROM mcp_sessions_toolcall "
                "WHERE error_kind <> '' ORDER BY error_kind, created_at"
            ).fetchall()
        )
    return {
        "statuses": statuses,
        "error_kinds": kinds,
        "examples": examples,
        "unended": unended,
        "unended_rows": unended_rows,
        "unaudited": unaudited,
    }
