"""`claude mcp add --transport http portal http://host/mcp/` with nothing else: the mcp SDK's own OAuth
client against a real portal process, the portal as the endpoint's authorization server.

The client starts with no token. Its first request gets the endpoint's 401; it follows the
challenge to the protected resource metadata (RFC 9728), the authorization server metadata
(RFC 8414), registers itself (RFC 7591) or names its client ID metadata document, and hands the
authorization URL to a person (here `Person`, with httpx: the portal's login page, then its consent
page; tests/browser/test_oauth_consent_browser.py does the same page in Chromium). The browser comes
back to the client's loopback listener with the code, the client exchanges it (PKCE, RFC 8707
resource) and calls tools with the token, in both protocol eras.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from html import unescape
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import pytest
from django.conf import settings

from tests.conftest import PortalProcess
from tests.oauth_helpers import https_documents

pytestmark = pytest.mark.django_db(transaction=True)

ERAS = ["legacy", "2026-07-28"]
CLIENT_NAME = "Claude Code"
CLIENT_INFO = ("claude-code", "2.1.0")
HIDDEN = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)"')


@contextmanager
def portal_process(name: str, **env: str) -> Iterator[PortalProcess]:
    from django.db import connection

    db = dict(connection.settings_dict)
    process = PortalProcess(db, Path(settings.VAR_DIR) / f"test-{name}.log")
    # Registrations are limited per address, and every test here registers from 127.0.0.1. The person
    # here is httpx over plain http, which keeps the distributed mode's Secure cookies to itself (a
    # browser sends them to 127.0.0.1); the flags are tested in tests/security/test_csrf_and_cookies.py.
    quirks = {"PORTAL_OAUTH_REGISTRATIONS_PER_MINUTE": "0", "PORTAL_SECURE_COOKIES": "0"}
    with mock.patch.dict(os.environ, {**quirks, **env}):
        process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def documents(tmp_path_factory) -> Iterator[tuple[str, dict[str, bytes], Path]]:
    """Where a client publishes its client ID metadata document (https, its own certificate)."""
    with https_documents(tmp_path_factory.mktemp("cimd")) as served:
        yield served


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, worker, documents) -> Iterator[PortalProcess]:
    _, _, cert_file = documents
    with django_db_blocker.unblock(), portal_process("endpoint-oauth", PORTAL_OAUTH_CIMD_CA_FILE=str(cert_file)) as p:
        yield p


@pytest.fixture
def demo(demo_server):
    from servers.models import Effect, PermissionRule

    PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo", effect=Effect.ALLOW)
    return demo_server


# -- the client's side: its loopback listener and its token storage --------------------------


class Loopback:
    """The client's loopback listener (RFC 8252 §7.3) the browser is sent back to with the code,
    as Claude Code runs one on a port of its choosing."""

    def __init__(self) -> None:
        heard: list[str] = []
        self.heard = heard

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
                heard.append(self.path)
                body = b"You may close this window."
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.server.server_port}/callback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    async def answer(self):
        from mcp.shared.auth import AuthorizationCodeResult

        assert self.heard, "the browser never came back to the client"
        query = parse_qs(urlsplit(self.heard[-1]).query)
        assert "error" not in query, query
        return AuthorizationCodeResult(code=query["code"][0], state=query["state"][0], iss=query.get("iss", [None])[0])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Storage:
    """The SDK's TokenStorage, in memory: what the client keeps between its sessions."""

    def __init__(self) -> None:
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens) -> None:
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info) -> None:
        self.client_info = client_info


# -- the person's side: the portal's login page and consent page ------------------------------


def hidden_fields(html: str) -> dict[str, str]:
    return {name: unescape(value) for name, value in HIDDEN.findall(html)}


class Person:
    """Opens the authorization URL the client hands over, logs in on the portal's login page and
    allows on its consent page, and is sent back to the client's loopback listener."""

    def __init__(self, username: str, decision: str = "allow") -> None:
        self.username = username
        self.decision = decision
        self.asked: list[str] = []  # the authorization URLs the client handed over
        self.consent_pages: list[str] = []

    async def authorize(self, url: str) -> None:
        self.asked.append(url)
        await asyncio.to_thread(self._authorize, url)

    def _authorize(self, url: str) -> None:
        with httpx.Client(timeout=30) as browser:
            first = browser.get(url)
            assert first.status_code == 302, first.text
            login_url = urljoin(url, first.headers["location"])
            assert urlsplit(login_url).path == "/accounts/login/", login_url
            login = browser.get(login_url)
            assert login.status_code == 200, login.text
            fields = {
                **hidden_fields(login.text),
                "login": self.username,
                "password": "pw-" + self.username,
            }
            logged_in = browser.post(login_url, data=fields)
            assert logged_in.status_code == 302, logged_in.text[:2000]
            back_to = urljoin(login_url, logged_in.headers["location"])
            assert urlsplit(back_to).path == "/oauth/authorize", back_to
            page = browser.get(back_to)
            assert page.status_code == 200, page.text
            self.consent_pages.append(page.text)
            form = hidden_fields(page.text)
            if self.decision == "allow":
                form["allow"] = "Authorize"
            answer = browser.post(str(page.url.copy_with(query=None)), data=form)
            assert answer.status_code == 302, answer.text
            callback = browser.get(answer.headers["location"])  # the client's loopback listener
            assert callback.status_code == 200


# -- a session of the SDK's client, with its OAuth provider ------------------------------------


class Steps:
    """Every HTTP exchange of the client (the OAuth provider's requests too), in order."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, response) -> None:
        request = response.request
        self.seen.append(f"{request.method} {request.url.path} {response.status_code}")

    def before(self, first: str, then: str) -> bool:
        return first in self.seen and then in self.seen[self.seen.index(first) + 1 :]


class Agent:
    """An MCP client as `claude mcp add --transport http portal <url>` configures it: the URL and
    nothing else; what it learns (its registration, its tokens) it keeps in `storage`."""

    def __init__(self, url: str, person: Person, client_metadata_url: str | None = None) -> None:
        self.url = url
        self.person = person
        self.client_metadata_url = client_metadata_url
        self.storage = Storage()
        self.loopback = Loopback()
        self.steps = Steps()
        self.provider = None

    def _provider(self):
        from mcp.client.auth import OAuthClientProvider
        from mcp.shared.auth import OAuthClientMetadata

        metadata = OAuthClientMetadata(
            client_name=CLIENT_NAME,
            redirect_uris=[self.loopback.uri],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        )
        return OAuthClientProvider(
            server_url=self.url,
            client_metadata=metadata,
            storage=self.storage,
            redirect_handler=self.person.authorize,
            callback_handler=self.loopback.answer,
            client_metadata_url=self.client_metadata_url,
        )

    async def session(self, mode: str, work) -> Any:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp_types import Implementation

        # One provider for the agent's life, as one Claude Code process keeps one.
        self.provider = self.provider or self._provider()
        http = httpx2.AsyncClient(
            auth=self.provider, timeout=httpx2.Timeout(60, read=120), event_hooks={"response": [self.steps]}
        )
        async with http:
            transport = streamable_http_client(self.url, http_client=http)
            info = Implementation(name=CLIENT_INFO[0], version=CLIENT_INFO[1])
            async with Client(transport, mode=mode, client_info=info) as client:
                return await work(client)

    def run(self, mode: str, work) -> Any:
        return asyncio.run(self.session(mode, work))

    def close(self) -> None:
        self.loopback.close()


@pytest.fixture
def agents() -> Iterator[Any]:
    made: list[Agent] = []

    def make(url: str, person: Person, **options: Any) -> Agent:
        made.append(Agent(url, person, **options))
        return made[-1]

    yield make
    for agent in made:
        agent.close()


async def list_and_echo(client, tool: str) -> tuple[Any, Any]:
    return await client.list_tools(), await client.call_tool(tool, {"message": "signed in by OAuth"})


def endpoint_call(url: str, token: str) -> httpx.Response:
    """A handshake-era initialize with `token`, bare: 200, or the door's 401."""
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "curl", "version": "1"}}
    return httpx.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params},
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
        timeout=30,
    )


def assert_recorded_via_mcp(tool: str, user) -> None:
    from sessions.models import ToolCall, Via

    call = ToolCall.objects.get(tool=tool)
    assert (call.via, call.status, call.user) == (Via.MCP, "succeeded", user)
    assert call.client == " ".join(CLIENT_INFO)
    assert call.access_token is None  # an OAuth token, not a personal access token


# -- the flow -----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ERAS)
@pytest.mark.parametrize(
    ("path", "tool"),
    [
        ("/mcp/demo/", "echo"),
        ("/mcp/", "demo__echo"),
        # Typed without the slash: the same endpoint, and the token is bound to it as /mcp/.
        ("/mcp", "demo__echo"),
    ],
)
def test_a_client_with_only_the_url_registers_signs_in_and_calls(portal, alice, demo, agents, mode, path, tool):
    from oauth2_provider.models import AccessToken, Application

    person = Person("alice")
    agent = agents(f"{portal.url}{path}", person)
    listed, echoed = agent.run(mode, lambda client: list_and_echo(client, tool))

    assert tool in [t.name for t in listed.tools]
    assert echoed.is_error is False and echoed.content[0].text == "signed in by OAuth"
    assert_recorded_via_mcp(tool.removeprefix("demo__"), alice)
    # The flow as it went over the wire.
    well_known = f"/.well-known/oauth-protected-resource{path.rstrip('/')}"
    seen = agent.steps.seen
    assert seen[0] == f"POST {path} 401", seen
    for first, then in (
        (f"POST {path} 401", f"GET {well_known} 200"),
        (f"GET {well_known} 200", "GET /.well-known/oauth-authorization-server 200"),
        ("GET /.well-known/oauth-authorization-server 200", "POST /oauth/register 201"),
        ("POST /oauth/register 201", "POST /oauth/token 200"),
        ("POST /oauth/token 200", f"POST {path} 200"),
    ):
        assert agent.steps.before(first, then), (first, then, seen)
    assert len(person.asked) == 1
    asked = parse_qs(urlsplit(person.asked[0]).query)
    resource = f"{portal.url}{path.rstrip('/')}/"
    assert asked["resource"] == [resource] and asked["code_challenge_method"] == ["S256"]
    assert "Let Claude Code act as you?" in person.consent_pages[0]
    app = Application.objects.get(client_id=agent.storage.client_info.client_id)
    assert app.registration_source == Application.RegistrationSource.DCR and app.name == CLIENT_NAME
    token = AccessToken.objects.get(application=app)
    assert token.resource == [resource] and token.user == alice


@pytest.mark.parametrize("mode", ERAS)
def test_a_client_that_publishes_its_metadata_document_needs_no_registration(
    portal, alice, demo, agents, documents, mode
):
    from oauth2_provider.models import Application

    base, published, _ = documents
    client_id = f"{base}/claude-code-{mode}.json"
    # Loopback redirect URIs are matched on any port (RFC 8252 §7.3): the document names none.
    published[urlsplit(client_id).path] = json.dumps(
        {
            "client_id": client_id,
            "client_name": CLIENT_NAME,
            "redirect_uris": ["http://127.0.0.1/callback", "http://localhost/callback"],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }
    ).encode()
    person = Person("alice")
    agent = agents(f"{portal.url}/mcp/demo/", person, client_metadata_url=client_id)
    listed, echoed = agent.run(mode, lambda client: list_and_echo(client, "echo"))

    assert echoed.is_error is False and echoed.content[0].text == "signed in by OAuth"
    assert_recorded_via_mcp("echo", alice)
    assert not any("/oauth/register" in step for step in agent.steps.seen), agent.steps.seen
    assert parse_qs(urlsplit(person.asked[0]).query)["client_id"] == [client_id]
    assert f"describes itself at <strong>{urlsplit(client_id).netloc}</strong>" in person.consent_pages[0]
    app = Application.objects.get(client_id=client_id)
    assert app.registration_source == Application.RegistrationSource.CIMD


# -- the token's life ---------------------------------------------------------------------------


def test_an_expired_access_token_is_refreshed_without_asking_the_person_again(
    django_db_blocker, worker, alice, demo, agents
):
    from oauth2_provider.models import AccessToken, RefreshToken

    # The portal issues tokens of a few seconds here, so the client's own clock says "refresh".
    with (
        django_db_blocker.unblock(),
        portal_process("endpoint-oauth-refresh", PORTAL_OAUTH_ACCESS_TOKEN_SECONDS="3") as p,
    ):
        person = Person("alice")
        agent = agents(f"{p.url}/mcp/demo/", person)

        async def twice(client):
            first = await client.call_tool("echo", {"message": "one"})
            await asyncio.sleep(4)
            return first, await client.call_tool("echo", {"message": "two"})

        first, second = agent.run("legacy", twice)
        again = agent.run("2026-07-28", lambda client: client.call_tool("echo", {"message": "three"}))

    assert first.is_error is False and second.is_error is False and second.content[0].text == "two"
    assert again.is_error is False
    assert len(person.asked) == 1  # refreshed, not signed in again
    refreshes = [step for step in agent.steps.seen if step == "POST /oauth/token 200"]
    assert len(refreshes) >= 2, agent.steps.seen
    assert not any(step.endswith(" 401") for step in agent.steps.seen[1:]), agent.steps.seen
    # Each refresh rotated the refresh token: only the newest is live.
    assert RefreshToken.objects.filter(user=alice, revoked__isnull=True).count() == 1
    assert AccessToken.objects.filter(user=alice).count() >= 1


def test_a_token_that_expired_early_sends_the_client_to_sign_in_again(portal, alice, demo, agents):
    from django.utils import timezone
    from oauth2_provider.models import AccessToken

    person = Person("alice")
    agent = agents(f"{portal.url}/mcp/demo/", person)
    agent.run("2026-07-28", lambda client: client.call_tool("echo", {"message": "one"}))
    # Expired at the portal while the client's clock still trusts it (a shortened lifetime, skew).
    AccessToken.objects.filter(user=alice).update(expires=timezone.now() - timezone.timedelta(seconds=1))
    again = agent.run("2026-07-28", lambda client: client.call_tool("echo", {"message": "two"}))

    assert again.is_error is False and again.content[0].text == "two"
    # The SDK's provider answers a 401 with a new authorization, not a refresh (it refreshes only on
    # its own clock): the person is asked again. The registration is kept.
    assert len(person.asked) == 2
    assert agent.steps.seen.count("POST /oauth/register 201") == 1


def test_a_token_for_one_server_is_refused_at_the_aggregate_endpoint(portal, alice, demo, agents):
    agent = agents(f"{portal.url}/mcp/demo/", Person("alice"))
    agent.run("2026-07-28", lambda client: client.list_tools())
    token = agent.storage.tokens.access_token

    assert endpoint_call(f"{portal.url}/mcp/demo/", token).status_code == 200
    refused = endpoint_call(f"{portal.url}/mcp/", token)
    assert refused.status_code == 401
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]
    assert (
        f'resource_metadata="{portal.url}/.well-known/oauth-protected-resource/mcp"'
        in refused.headers["www-authenticate"]
    )


def test_a_token_revoked_at_the_revoke_endpoint_is_refused_at_once(portal, alice, demo, agents):
    agent = agents(f"{portal.url}/mcp/demo/", Person("alice"))
    agent.run("legacy", lambda client: client.list_tools())
    token, client_id = agent.storage.tokens.access_token, agent.storage.client_info.client_id

    revoked = httpx.post(f"{portal.url}/oauth/revoke", data={"token": token, "client_id": client_id}, timeout=30)
    assert revoked.status_code == 200, revoked.text
    assert endpoint_call(f"{portal.url}/mcp/demo/", token).status_code == 401


def test_revoking_the_client_on_the_agents_page_refuses_its_tokens_at_once(portal, alice, demo, agents):
    agent = agents(f"{portal.url}/mcp/", Person("alice"))
    agent.run("2026-07-28", lambda client: client.list_tools())
    tokens, client_id = agent.storage.tokens, agent.storage.client_info.client_id
    assert endpoint_call(f"{portal.url}/mcp/", tokens.access_token).status_code == 200

    with httpx.Client(base_url=portal.url, timeout=30) as browser:
        login = browser.get("/accounts/login/")
        fields = {**hidden_fields(login.text), "login": "alice", "password": "pw-alice"}
        assert browser.post("/accounts/login/", data=fields).status_code == 302
        page = browser.get("/agents/")
        assert CLIENT_NAME in page.text
        action = re.search(r'<form method="post" action="(/agents/oauth/\d+/revoke)">', page.text).group(1)
        answer = browser.post(action, data=hidden_fields(page.text.split(action, 1)[1]))
        assert answer.status_code == 302 and answer.headers["location"] == "/agents/"

    assert endpoint_call(f"{portal.url}/mcp/", tokens.access_token).status_code == 401
    refresh = httpx.post(
        f"{portal.url}/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": tokens.refresh_token, "client_id": client_id},
        timeout=30,
    )
    assert refresh.status_code == 400 and refresh.json()["error"] == "invalid_grant"
