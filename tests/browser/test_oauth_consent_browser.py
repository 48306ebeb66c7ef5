"""Connecting an MCP client through the portal's own sign-in, in real Chromium: a client registers
itself, sends the person to the authorize page, the person logs in on the portal's login page,
reads the consent naming the client, allows, and the client's loopback listener gets a code."""

from __future__ import annotations

import base64
import hashlib
import http.server
import re
import secrets
import threading
from collections.abc import Iterator
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


@pytest.fixture
def loopback_listener() -> Iterator[dict]:
    """What a native MCP client runs to receive the redirect: a one-page HTTP server on 127.0.0.1."""
    received: dict = {}

    class Callback(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
            # Chromium asks for /favicon.ico as well: only the callback counts.
            if urlsplit(self.path).path == "/callback":
                received["query"] = parse_qs(urlsplit(self.path).query)
            body = b"<!doctype html><title>Signed in</title><p>You can close this window.</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Callback)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield {"url": f"http://127.0.0.1:{server.server_port}/callback", "received": received}
    finally:
        server.shutdown()
        server.server_close()


def test_consent_through_the_portals_login(page: Page, live_portal, bob, loopback_listener):
    base = live_portal["url"]
    registered = httpx.post(
        f"{base}/oauth/register",
        json={"client_name": "Claude Code", "redirect_uris": [loopback_listener["url"]]},
    )
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    query = urlencode(
        {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": loopback_listener["url"],
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "state": "xyz",
            "scope": "mcp",
            "resource": f"{base}/mcp/",
        }
    )

    page.goto(f"/oauth/authorize?{query}")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/oauth/authorize"))
    page.get_by_label("Login").fill("bob")
    page.get_by_label("Password").fill("pw-bob")
    page.get_by_role("button", name="Log in").click()

    heading = page.get_by_role("heading", level=1)
    expect(heading).to_have_text("Let Claude Code act as you?")
    consent = page.locator("#oauth-consent")
    expect(consent).to_contain_text("every server of your teams")
    expect(consent).to_contain_text(urlsplit(loopback_listener["url"]).netloc)
    page.screenshot(path=str(SCREENSHOTS / "oauth-consent.png"), full_page=True)
    assert page.problems == []

    page.get_by_role("button", name="Allow").click()
    expect(page.get_by_text("You can close this window.")).to_be_visible()
    received = loopback_listener["received"]["query"]
    assert received["state"] == ["xyz"]
    code = received["code"][0]

    # The client's half, to show the code is good (the flow itself is tests/test_oauth_server.py's).
    token = httpx.post(
        f"{base}/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": loopback_listener["url"],
            "client_id": client_id,
            "code_verifier": verifier,
        },
    )
    assert token.status_code == 200, token.text
    assert token.json()["scope"] == "mcp"
