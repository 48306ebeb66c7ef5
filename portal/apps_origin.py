"""The origin MCP Apps run on (PORTAL_APPS_ORIGIN, docs/tasks-and-apps.md): it serves only the sandbox page.

A server's app is HTML the portal did not write. The playground never puts it on its own origin: it
frames this origin's sandbox page (the MCP Apps "sandbox proxy"), which renders the app in an inner
iframe `sandbox="allow-scripts"` (an opaque origin: no cookies, no storage, no reach into any page)
under a Content-Security-Policy made from the domains the app's resource declares, none by default.

Requests reach it by the port `runportal` serves it on, or by the Host of PORTAL_APPS_ORIGIN (a proxy
in front of the portal). Nothing of the portal answers there: no Django, no session, no cookie set,
no WebSocket; and the portal's own origin never serves the sandbox page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.template.loader import render_to_string

from portal.origin import DEFAULT_PORTS

SANDBOX_SCRIPT = Path(settings.BASE_DIR) / "static" / "sandbox.js"
# A declared domain is an origin, a wildcard subdomain at most (`https://*.example.com`): anything else
# (a keyword such as 'unsafe-eval', a path, a space or a `;` that would start another directive) is dropped.
SOURCE = re.compile(r"^(https?|wss?)://(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)*(:[0-9]{1,5})?$")
MAX_DOMAINS = 32
MAX_QUERY = 8_000

# The port runportal serves the apps origin on (serve_apps_at), when it does.
listening_port: int | None = None


def serve_apps_at(port: int | None) -> None:
    global listening_port
    listening_port = port


# -- the policy ---------------------------------------------------------------------------------


def declared(csp: Any, name: str) -> list[str]:
    """The valid origins of one of the resource's `_meta.ui.csp` lists (connectDomains, resourceDomains,
    frameDomains, baseUriDomains)."""
    values = csp.get(name) if isinstance(csp, Mapping) else None
    if not isinstance(values, list):
        return []
    kept = [v.strip().lower() for v in values if isinstance(v, str)]
    return list(dict.fromkeys(v for v in kept if SOURCE.match(v)))[:MAX_DOMAINS]


def sandbox_csp(csp: Any, portal_origins: list[str]) -> str:
    """The sandbox page's policy, which the app's document (its srcdoc) inherits.

    The extension's restrictive default (no network, inline script and style only) widened by exactly
    what the resource declares; `'self'` is this origin, which serves nothing but the sandbox page.
    Only the portal may frame it.
    """
    resources = " ".join(declared(csp, "resourceDomains"))
    connect = " ".join(declared(csp, "connectDomains")) or "'none'"
    frames = " ".join(declared(csp, "frameDomains")) or "'none'"
    bases = " ".join(declared(csp, "baseUriDomains")) or "'none'"
    ancestors = " ".join(portal_origins) or "'none'"
    directives = [
        "default-src 'none'",
        f"script-src 'self' 'unsafe-inline' {resources}",
        f"style-src 'self' 'unsafe-inline' {resources}",
        f"img-src 'self' data: {resources}",
        f"font-src 'self' data: {resources}",
        f"media-src 'self' data: {resources}",
        f"connect-src {connect}",
        f"frame-src {frames}",
        f"base-uri {bases}",
        "object-src 'none'",
        "form-action 'none'",
        f"frame-ancestors {ancestors}",
    ]
    return "; ".join(d.strip() for d in directives)


def portal_origins() -> list[str]:
    """The origins the playground is served from, which alone may frame the sandbox and talk to it."""
    origins = []
    for url in [settings.SITE_URL, *settings.PORTAL_WEBSOCKET_ORIGINS]:
        parts = urlsplit(url.strip())
        if parts.scheme in DEFAULT_PORTS and parts.hostname:
            origins.append(f"{parts.scheme}://{parts.netloc.lower()}")
    return list(dict.fromkeys(origins))


def apps_origin() -> str:
    """PORTAL_APPS_ORIGIN as an origin, or "" when apps are off (unset, or the portal's own origin)."""
    parts = urlsplit(settings.PORTAL_APPS_ORIGIN)
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return ""
    origin = f"{parts.scheme}://{parts.netloc.lower()}"
    # On the portal's own origin an app would be same-origin with the portal: refuse to show any.
    return "" if origin in portal_origins() else origin


# -- routing ------------------------------------------------------------------------------------


def _host(scope: Mapping[str, Any]) -> str:
    for name, value in scope.get("headers", []):
        if name == b"host":
            return value.decode("latin1").lower()
    return ""


def for_apps(scope: Mapping[str, Any]) -> bool:
    """Whether a request came to the apps origin: the port runportal serves it on, or its Host."""
    server = scope.get("server")
    if listening_port is not None and server and server[1] == listening_port:
        return True
    origin = apps_origin()
    if not origin:
        return False
    parts = urlsplit(origin)
    host = _host(scope)
    wanted = parts.netloc
    # A Host without a port names the scheme's default one (a proxy in front may leave it out).
    return host == wanted or (parts.port is None and host == f"{parts.hostname}:{DEFAULT_PORTS[parts.scheme]}")


class AppsOriginRouter:
    """`portal` for the portal's requests, the sandbox for the apps origin's (see the module's docstring)."""

    def __init__(self, portal: Any):
        self.portal = portal

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] in ("http", "websocket") and for_apps(scope):
            return await sandbox(scope, receive, send)
        return await self.portal(scope, receive, send)


# -- the sandbox page -----------------------------------------------------------------------------

COMMON_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
    # Camera, microphone and the like are not offered to apps (the extension's `permissions`).
    (b"permissions-policy", b"camera=(), microphone=(), geolocation=(), clipboard-write=()"),
]


async def _respond(send: Any, status: int, content_type: bytes, body: bytes, extra: list | None = None) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *COMMON_HEADERS]
    await send({"type": "http.response.start", "status": status, "headers": headers + (extra or [])})
    await send({"type": "http.response.body", "body": body})


def _declared_csp(query: bytes) -> Any:
    if len(query) > MAX_QUERY:
        return None
    values = parse_qs(query.decode("latin1")).get("csp")
    try:
        return json.loads(values[0]) if values else None
    except ValueError:
        return None


async def sandbox(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.close", "code": 1008})
        return
    method, path = scope.get("method", "GET"), scope.get("path", "/")
    if method not in ("GET", "HEAD"):
        await _respond(send, 405, b"text/plain; charset=utf-8", b"Only GET.\n", [(b"allow", b"GET, HEAD")])
    elif path == "/":
        origins = portal_origins()
        page = render_to_string("sessions/sandbox.html", {"portal_origins": " ".join(origins)}).encode()
        policy = sandbox_csp(_declared_csp(scope.get("query_string", b"")), origins)
        await _respond(send, 200, b"text/html; charset=utf-8", page, [(b"content-security-policy", policy.encode())])
    elif path == "/sandbox.js":
        await _respond(send, 200, b"text/javascript; charset=utf-8", SANDBOX_SCRIPT.read_bytes())
    else:
        await _respond(send, 404, b"text/plain; charset=utf-8", b"Only the MCP Apps sandbox is served here.\n")
