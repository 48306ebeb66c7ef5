"""The OAuth redirect URI follows where the portal is served, a registration made for another one is
made again, an authorization server's refusal is explained, and an expected needs-auth is one line
of log (docs/credentials.md)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from mcp.shared.auth import OAuthClientInformationFull

from servers.credentials.models import Credential
from sessions.connection_needs import clear_needs_auth, owner_of
from sessions.oauth import CredentialRowStore
from tests.conftest import ROOT, free_port, stop, wait_for_port
from tests.helpers import logged_in
from tests.oauth_helpers import approve, authorization_url, connect, control, stats
from tests.ws import Playground, call, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def whoami(user, server) -> dict:
    return call(user, server, "whoami")


def test_a_portal_served_on_another_port_makes_that_port_its_redirect_uri(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("SITE_URL", "PORTAL_OAUTH_REDIRECT_URI")}
    log = tmp_path / "portal.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runportal", "--port", str(port), "--no-worker"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, timeout=60, process=process)
            document = httpx.get(f"http://127.0.0.1:{port}/oauth/client-metadata.json", timeout=10).json()
        finally:
            stop(process)
    assert document["redirect_uris"] == [f"http://127.0.0.1:{port}/oauth/callback"], log.read_text()
    assert document["client_uri"] == f"http://127.0.0.1:{port}"
    assert f"OAuth redirect URI: http://127.0.0.1:{port}/oauth/callback" in log.read_text()


def test_admins_are_told_when_the_page_is_served_elsewhere_than_the_redirect_uri(alice, bob, oauth_server):
    # The server asks for an authorization: from then on the portal knows it uses OAuth.
    assert whoami(alice, oauth_server)["error_kind"] == "needs_auth"
    here = settings.PORTAL_OAUTH_REDIRECT_URI.removesuffix("/oauth/callback").removeprefix("http://")
    elsewhere = "127.0.0.1:1"
    for path in ("/credentials/", "/servers/"):
        admin_elsewhere = logged_in(alice).get(path, HTTP_HOST=elsewhere).content.decode()
        assert 'id="redirect-uri-mismatch"' in admin_elsewhere, path
        assert f"served from <code>http://{elsewhere}</code>" in admin_elsewhere
        assert settings.PORTAL_OAUTH_REDIRECT_URI in admin_elsewhere
        assert 'id="redirect-uri-mismatch"' not in logged_in(alice).get(path, HTTP_HOST=here).content.decode()
        # A member cannot change SITE_URL and is not the one to tell.
        assert 'id="redirect-uri-mismatch"' not in logged_in(bob).get(path, HTTP_HOST=elsewhere).content.decode()


def test_a_registration_for_an_old_redirect_uri_is_made_again_and_consent_completes(alice, oauth_server, oauth_base):
    # What an earlier SITE_URL left: a client the server knows only with the old redirect URI.
    old = "http://127.0.0.1:1/oauth/callback"
    registered = httpx.post(
        f"{oauth_base}/register",
        json={"redirect_uris": [old], "token_endpoint_auth_method": "client_secret_post"},
        timeout=10,
    ).json()
    stale = OAuthClientInformationFull.model_validate({**registered, "issuer": oauth_base})
    async_to_sync(CredentialRowStore(oauth_server.pk, user_id=alice.pk).set_client_info)(stale)
    before = stats(oauth_base)

    # Reused as it was, the authorization page would answer "unknown client or redirect_uri".
    connect(logged_in(alice), oauth_server.pk, "alice-at-idp")

    assert stats(oauth_base)["register"] - before.get("register", 0) == 1
    client_info = Credential.objects.get(server=oauth_server, user=alice, kind="oauth").open_json()["client_info"]
    assert client_info["client_id"] != registered["client_id"]
    assert client_info["redirect_uris"] == [settings.PORTAL_OAUTH_REDIRECT_URI]
    ended = whoami(alice, oauth_server)
    assert ended["status"] == "succeeded" and ended["result"]["content"][0]["text"] == "alice-at-idp", ended


def test_a_refused_client_is_explained_forgotten_and_registered_again(alice, oauth_server, oauth_base):
    client = logged_in(alice)
    control(oauth_base, authorize_error="unauthorized_client", authorize_error_description="client c-1 is unknown")
    started = client.post(f"/credentials/{oauth_server.pk}/connect/", {"next": "/credentials/"})
    page = client.get(approve(authorization_url(started), "alice"), follow=True).content.decode()
    assert "guarded answered unauthorized_client (client c-1 is unknown)." in page
    assert "The portal dropped that registration and registers again: press Connect your account." in page
    row = Credential.objects.get(server=oauth_server, user=alice, kind="oauth")
    assert not row.has_tokens and "client_info" not in row.open_json()

    control(oauth_base, authorize_error=None, authorize_error_description=None)
    before = stats(oauth_base)
    connect(client, oauth_server.pk, "alice-at-idp")
    assert stats(oauth_base)["register"] - before.get("register", 0) == 1
    assert whoami(alice, oauth_server)["status"] == "succeeded"


def test_a_connect_after_one_that_never_came_back_registers_again(alice, oauth_server, oauth_base):
    client = logged_in(alice)
    connect(client, oauth_server.pk, "alice-at-idp")
    control(oauth_base, forget_clients=True)
    # The server shows its own error page: nothing comes back to the portal.
    started = client.post(f"/credentials/{oauth_server.pk}/connect/", {"next": "/credentials/"})
    lost_url = authorization_url(started)
    lost = httpx.get(lost_url, timeout=10)
    assert lost.status_code == 400 and lost.text == "unknown client or redirect_uri"

    before = stats(oauth_base)
    connect(client, oauth_server.pk, "alice-again")
    assert stats(oauth_base)["register"] - before.get("register", 0) == 1
    assert whoami(alice, oauth_server)["result"]["content"][0]["text"] == "alice-again"
    # The abandoned attempt still waits for its callback (for minutes): end it as a person would.
    state = parse_qs(urlsplit(lost_url).query)["state"][0]
    client.get("/oauth/callback", {"state": state, "error": "access_denied"})
    assert whoami(alice, oauth_server)["result"]["content"][0]["text"] == "alice-again"


def test_a_declined_consent_is_explained(alice, oauth_server):
    client = logged_in(alice)
    started = client.post(f"/credentials/{oauth_server.pk}/connect/", {"next": "/credentials/"})
    page = client.get(approve(authorization_url(started), "alice", decision="deny"), follow=True).content.decode()
    assert "guarded answered access_denied. The authorization was declined, so nothing was stored." in page


def test_revoke_is_offered_only_with_tokens_and_ready_only_once_connected(alice, oauth_server):
    client = logged_in(alice)

    def card() -> str:
        page = client.get("/credentials/").content.decode()
        return page[page.index(f'id="server-{oauth_server.pk}"') :]

    assert whoami(alice, oauth_server)["error_kind"] == "needs_auth"  # now known to use OAuth
    assert "Revoke" not in card() and ">ready<" not in card()
    started = client.post(f"/credentials/{oauth_server.pk}/connect/", {"next": "/credentials/"})
    client.get(approve(authorization_url(started), "alice", decision="deny"))
    # A row now carries the error, but holds no token: still nothing to revoke.
    assert Credential.objects.filter(server=oauth_server, user=alice, kind="oauth").exists()
    assert "Revoke" not in card()
    connect(client, oauth_server.pk, "alice-at-idp")
    assert "Revoke" in card() and ">ready<" in card()


@pytest.mark.skipif(not settings.EMBEDDED, reason="reads the worker's log, which is in this process only when embedded")
def test_an_expected_needs_auth_on_test_connection_logs_one_line(alice, oauth_server, caplog):
    cookie = session_cookie(alice)

    async def test_connection():
        async with Playground(cookie) as ws:
            await ws.send({"type": "test_connection", "server": oauth_server.pk})
            return await ws.until("connection.tested", server=oauth_server.pk)

    # The embedded worker configures logging when it starts, dropping pytest's handler: start it
    # first, then listen (and forget that the server asked, so the second test asks it again).
    asyncio.run(test_connection())
    clear_needs_auth(oauth_server.pk, owner_of(alice.pk))
    caplog.clear()
    logging.getLogger().addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO):
            tested = asyncio.run(test_connection())
    finally:
        logging.getLogger().removeHandler(caplog.handler)
    assert tested["ok"] is False and tested["kind"] == "needs_auth", tested
    records = {id(r): r for r in caplog.records}.values()
    assert [r for r in records if r.exc_info] == []
    about_auth = [r.getMessage() for r in records if "authoriz" in r.getMessage().lower()]
    assert about_auth == [f"OAuth: {oauth_server.url} needs an authorization and no one is there to give it"]
