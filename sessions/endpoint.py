"""The door of the portal's MCP endpoint: `/mcp/` and `/mcp/<server>/`, over Streamable HTTP.

Every request is checked here before the MCP server (sessions/mcp/endpoint.py) sees it: the Host and
Origin (DNS rebinding), the bearer credential (sessions/agent_auth.py; a 401 names where to sign
in), the per-credential rate limit, and that the path's server is one the person may use. A
handshake-era session (`Mcp-Session-Id`) is bound to the credential that opened it: another
credential presenting its id hears the same 404 as for an unknown session.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings

from portal.origin import endpoint_request_allowed

from . import agent_auth, limits
from .gateway import PortalGateway, _one_server
from .mcp.endpoint import CALLER, Endpoint, Found, Refused

log = logging.getLogger(__name__)

PATH = re.compile(r"^/mcp(?:/(?P<server>[A-Za-z0-9_-]{1,80}))?/?$")

INSTRUCTIONS = (
    "The MCP Portal: your team's MCP servers, with your own credentials, under your team's rules. "
    "Tools that ask for approval wait until you answer in the portal (its Approvals page)."
)


def _headers(scope: dict[str, Any]) -> dict[bytes, str]:
    return {name.lower(): value.decode("latin1") for name, value in scope.get("headers", [])}


async def _respond(send: Any, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *headers],
        }
    )
    await send({"type": "http.response.body", "body": data})


async def _drain(receive: Any) -> None:
    """Read the request's body before answering without it (a client may block sending it)."""
    while True:
        message = await receive()
        if message.get("type") != "http.request" or not message.get("more_body"):
            return


def _admit(authorization: str | None, resource: str) -> Any:
    """The request's agent, counted against its credential's rate limit: one trip off the event loop
    for both (the count is a cache round trip, Redis in the distributed mode)."""
    agent = agent_auth.authenticate(authorization, resource)
    if agent is not None:
        limits.take_endpoint_request(agent.credential)
    return agent


class EndpointDoor:
    def __init__(self) -> None:
        self.endpoint = Endpoint(
            PortalGateway(),
            name="mcp-portal",
            instructions=INSTRUCTIONS,
            watch_every=settings.PORTAL_ENDPOINT_WATCH_SECONDS,
        )

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        matched = PATH.match(scope["path"])
        if matched is None:
            await _drain(receive)
            await _respond(send, 404, {"error": "not_found", "error_description": "No MCP endpoint here."})
            return
        if not endpoint_request_allowed(scope):
            await _drain(receive)
            await _respond(send, 403, {"error": "forbidden", "error_description": "Host or Origin not allowed."})
            return
        headers = _headers(scope)
        path = f"/mcp/{matched['server']}/" if matched["server"] else "/mcp/"
        base = f"{scope.get('scheme', 'http')}://{headers.get(b'host', '')}"
        try:
            agent = await database_sync_to_async(_admit)(headers.get(b"authorization"), base + path)
        except limits.RateLimited as exc:
            await _drain(receive)
            retry = [(b"retry-after", str(exc.retry_after).encode())]
            await _respond(send, 429, {"error": "rate_limited", "error_description": str(exc)}, retry)
            return
        if agent is None:
            await _drain(receive)
            sent = bool(agent_auth.bearer(headers.get(b"authorization")))
            challenge = agent_auth.challenge(base, path, "invalid_token" if sent else "")
            body = {
                "error": "invalid_token" if sent else "unauthorized",
                "error_description": "Sign in: send a personal access token or an OAuth access token of the portal.",
            }
            await _respond(send, 401, body, [(b"www-authenticate", challenge.encode())])
            return
        server = matched["server"] or ""
        if server:
            try:
                await database_sync_to_async(_one_server)(agent, server)
            except Refused:
                await _drain(receive)
                await _respond(send, 404, {"error": "not_found", "error_description": "Unknown server."})
                return
        await self.endpoint({**scope, CALLER: Found(agent, server, agent.credential)}, receive, send)


def routing(http_app: Any) -> Any:
    """The portal's HTTP app with the endpoint in front of it for `/mcp` paths."""
    door = EndpointDoor() if settings.PORTAL_MCP_ENDPOINT else None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if (
            door is not None
            and scope["type"] == "http"
            and (scope["path"] == "/mcp" or scope["path"].startswith("/mcp/"))
        ):
            await door(scope, receive, send)
            return
        await http_app(scope, receive, send)

    return app
