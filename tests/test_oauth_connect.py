"""Connecting an account to an OAuth-protected server, and calling its tools as that account."""

from __future__ import annotations

import pytest

from servers.credentials.models import Credential
from tests.helpers import logged_in
from tests.oauth_helpers import approve, authorization_url, connect, stats
from tests.ws import call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def test_it_connects_through_the_browser_flow_and_calls_as_that_user(alice, oauth_server, oauth_base):
    before = stats(oauth_base)
    first = call(alice, oauth_server, "whoami")
    assert first["status"] == "failed" and first["error_kind"] == "needs_auth", first
    assert "Connect your account" in first["error"]

    client = logged_in(alice)
    back = connect(client, oauth_server.pk, "alice-at-idp", next_url=f"/playground/?server={oauth_server.pk}")
    assert back == f"/playground/?server={oauth_server.pk}"

    ended = call(alice, oauth_server, "whoami")
    assert ended["status"] == "succeeded", (ended["error_kind"], ended["error"])
    assert ended["result"]["content"][0]["text"] == "alice-at-idp"
    row = Credential.objects.get(server=oauth_server, user=alice, kind="oauth")
    assert row.has_tokens and row.scope == "read" and row.expires_at is not None
    assert stats(oauth_base).get("authorize", 0) - before.get("authorize", 0) == 1


def test_a_denied_consent_says_so_and_stores_no_tokens(alice, oauth_server):
    client = logged_in(alice)
    started = client.post(f"/credentials/{oauth_server.pk}/connect/", {"next": "/credentials/"})
    back = client.get(approve(authorization_url(started), "alice", decision="deny"), follow=True)
    assert "access_denied" in back.content.decode()
    assert not Credential.objects.filter(server=oauth_server, user=alice, has_tokens=True).exists()


def test_a_callback_cannot_be_replayed_or_used_by_someone_else(alice, bob, oauth_server):
    alice_client = logged_in(alice)
    started = alice_client.post(f"/credentials/{oauth_server.pk}/connect/", {"next": "/credentials/"})
    callback = approve(authorization_url(started), "alice")
    stolen = logged_in(bob).get(callback, follow=True)
    assert "expired or was already used" in stolen.content.decode()
    assert alice_client.get(callback).status_code == 302
    replay = alice_client.get(callback, follow=True)
    assert "expired or was already used" in replay.content.decode()
