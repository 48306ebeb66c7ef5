"""The apps origin (portal/apps_origin.py): only the sandbox page answers there, under a policy made
from the app's declared domains and nothing else; the portal's own origin never serves it."""

from __future__ import annotations

import asyncio

import pytest
from channels.testing import HttpCommunicator, WebsocketCommunicator
from django.test import override_settings

from portal import apps_origin
from portal.apps_origin import declared, for_apps, sandbox_csp

PORTAL = "http://127.0.0.1:8000"
APPS = "http://127.0.0.1:8001"


def directives(policy: str) -> dict[str, str]:
    return {part.split(" ", 1)[0]: part.split(" ", 1)[1] for part in policy.split("; ")}


def test_with_nothing_declared_the_app_gets_no_network():
    policy = directives(sandbox_csp(None, [PORTAL]))
    assert policy["default-src"] == "'none'"
    assert policy["connect-src"] == "'none'" and policy["frame-src"] == "'none'" and policy["base-uri"] == "'none'"
    assert policy["script-src"] == "'self' 'unsafe-inline'" and policy["img-src"] == "'self' data:"
    assert policy["object-src"] == "'none'" and policy["form-action"] == "'none'"
    assert policy["frame-ancestors"] == PORTAL


def test_declared_domains_widen_only_their_directives_and_junk_is_dropped():
    csp = {
        "connectDomains": ["https://api.example.com", "wss://live.example.com", "https://x.com; script-src *"],
        "resourceDomains": ["https://*.cdn.example.com", "'unsafe-eval'", "*", "data:", "https://a.com/path", 7],
        "frameDomains": ["https://www.youtube.com"],
        "baseUriDomains": "https://not-a-list.com",
    }
    policy = directives(sandbox_csp(csp, [PORTAL]))
    assert policy["connect-src"] == "https://api.example.com wss://live.example.com"
    assert policy["script-src"] == "'self' 'unsafe-inline' https://*.cdn.example.com"
    assert policy["frame-src"] == "https://www.youtube.com" and policy["base-uri"] == "'none'"
    assert declared({"connectDomains": ["HTTPS://API.Example.com"] * 3}, "connectDomains") == [
        "https://api.example.com"
    ]


def test_a_request_is_the_apps_by_its_port_or_its_host():
    with override_settings(PORTAL_APPS_ORIGIN=APPS, SITE_URL=PORTAL):
        assert for_apps({"headers": [(b"host", b"127.0.0.1:8001")], "server": ("127.0.0.1", 8001)})
        assert not for_apps({"headers": [(b"host", b"127.0.0.1:8000")], "server": ("127.0.0.1", 8000)})
        apps_origin.serve_apps_at(8001)
        try:
            # Another name for the same port is still the apps origin, never the portal.
            assert for_apps({"headers": [(b"host", b"localhost:8001")], "server": ("127.0.0.1", 8001)})
        finally:
            apps_origin.serve_apps_at(None)
    with override_settings(PORTAL_APPS_ORIGIN="https://apps.example.com", SITE_URL="https://portal.example.com"):
        assert for_apps({"headers": [(b"host", b"apps.example.com")], "server": ("10.0.0.1", 8000)})
        assert for_apps({"headers": [(b"host", b"apps.example.com:443")], "server": ("10.0.0.1", 8000)})
        assert not for_apps({"headers": [(b"host", b"portal.example.com")], "server": ("10.0.0.1", 8000)})
    # On the portal's own origin an app would be same-origin with the portal: apps are off then.
    with override_settings(PORTAL_APPS_ORIGIN=PORTAL, SITE_URL=PORTAL):
        assert apps_origin.apps_origin() == ""


async def get(path: str, host: bytes) -> dict:
    from portal.asgi import application

    communicator = HttpCommunicator(application, "GET", path, headers=[(b"host", host)])
    return await communicator.get_response(timeout=10)


@pytest.mark.django_db
def test_only_the_sandbox_page_answers_on_the_apps_origin():
    with override_settings(PORTAL_APPS_ORIGIN=APPS, SITE_URL=PORTAL):
        page = asyncio.run(get("/", b"127.0.0.1:8001"))
        script = asyncio.run(get("/sandbox.js", b"127.0.0.1:8001"))
        login = asyncio.run(get("/accounts/login/", b"127.0.0.1:8001"))
        portal_login = asyncio.run(get("/accounts/login/", b"127.0.0.1:8000"))
    headers = {k.decode(): v.decode() for k, v in page["headers"]}
    assert page["status"] == 200 and "set-cookie" not in headers
    assert b'data-portal-origins="http://127.0.0.1:8000"' in page["body"]
    assert directives(headers["content-security-policy"])["frame-ancestors"] == PORTAL
    assert headers["referrer-policy"] == "no-referrer" and headers["cache-control"] == "no-store"
    assert script["status"] == 200 and b"sandbox-resource-ready" in script["body"]
    assert login["status"] == 404 and not any(k == b"set-cookie" for k, _ in login["headers"])
    assert portal_login["status"] == 200  # the portal itself, on its own origin


def test_no_websocket_opens_on_the_apps_origin():
    from portal.asgi import application

    async def scenario():
        communicator = WebsocketCommunicator(
            application, "/ws/playground/", headers=[(b"host", b"127.0.0.1:8001"), (b"origin", APPS.encode())]
        )
        connected, code = await communicator.connect(timeout=10)
        return connected, code

    with override_settings(PORTAL_APPS_ORIGIN=APPS, SITE_URL=PORTAL):
        assert asyncio.run(scenario()) == (False, 1008)
