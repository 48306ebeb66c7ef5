"""The WebSocket's Origin check: the page's own origin (scheme, host and port), or one the operator lists.

Django's CSRF check refuses a form posted from another origin; a WebSocket has no CSRF token, so its
handshake gets the same rule here. Comparing host names alone (channels' AllowedHostsOriginValidator)
let `http://127.0.0.1:9999` open a socket to a portal on `:8000` with the person's cookies.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http import HttpRequest
from django.http.request import split_domain_port, validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(text: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of an origin or URL, the default port filled in; None if it is not one."""
    try:
        parts = urlsplit(text.strip().lower())
        port = parts.port or DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or port is None:
        return None
    return parts.scheme, parts.hostname, port


def allowed_origins(scope: dict[str, Any], host: str) -> set[tuple[str, str, int]]:
    """The page's own origin, as the request reached this process, SITE_URL's (the address behind a
    proxy that ends TLS, where the request arrives as plain ws://), and PORTAL_WEBSOCKET_ORIGINS."""
    scheme = "https" if scope.get("scheme") == "wss" else "http"
    candidates = [f"{scheme}://{host}", settings.SITE_URL, *settings.PORTAL_WEBSOCKET_ORIGINS]
    return {origin for origin in map(_origin, candidates) if origin is not None}


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = {name: value.decode("latin1") for name, value in scope.get("headers", [])}
    origin, host = _origin(headers.get(b"origin", "")), headers.get(b"host", "")
    # The Host must be one of ours, as for any page (a rebound DNS name makes the browser send its own).
    domain, _ = split_domain_port(host)
    if origin is None or not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    return origin in allowed_origins(scope, host)


def endpoint_request_allowed(scope: dict[str, Any]) -> bool:
    """The MCP endpoint's DNS-rebinding check (the spec's): the Host is one of ours and an Origin, when
    a browser sends one, is the portal's own (or one the operator lists). Agents send no Origin."""
    headers = {name: value.decode("latin1") for name, value in scope.get("headers", [])}
    host = headers.get(b"host", "")
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return False
    if b"origin" not in headers:
        return True
    websocket_scheme = "wss" if scope.get("scheme") == "https" else "ws"
    return _origin(headers[b"origin"]) in allowed_origins({"scheme": websocket_scheme}, host)


def redirect_uri_mismatch(request: HttpRequest) -> dict[str, str] | None:
    """What admins are told when this page was reached elsewhere than the OAuth redirect URI points.

    An authorization server sends the browser back to the redirect URI after consent: served on
    another host or port, the person lands on the wrong address or on nothing. The scheme is not
    compared, nor a port the Host header leaves out: a proxy that ends TLS forwards plain HTTP.
    """
    host = request.get_host()
    domain, port = split_domain_port(host)
    target = urlsplit(settings.PORTAL_OAUTH_REDIRECT_URI)
    try:
        target_port = target.port or DEFAULT_PORTS.get(target.scheme)
    except ValueError:
        target_port = None
    same_host = domain.strip("[]") == (target.hostname or "")
    if same_host and (not port or int(port) == target_port):
        return None
    return {
        "here": f"{request.scheme}://{host}",
        "redirect_uri": settings.PORTAL_OAUTH_REDIRECT_URI,
        "site_url": settings.SITE_URL,
    }


class SameOriginValidator:
    """Refuse (HTTP 403, before any consumer runs) a WebSocket handshake from another origin."""

    def __init__(self, application: Any):
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
