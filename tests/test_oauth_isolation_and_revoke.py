"""Two people on one OAuth-protected server never share a token; Revoke ends a connection for good."""

from __future__ import annotations

import asyncio

import pytest
from django.conf import settings

from servers.credentials.models import Credential
from sessions.models import ConnectionStatus
from tests.helpers import eventually, live_keys, logged_in
from tests.oauth_helpers import connect
from tests.ws import Playground, call, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def test_two_users_call_the_same_server_at_once_each_with_their_own_token(alice, bob, oauth_server):
    connect(logged_in(alice), oauth_server.pk, "alice-at-idp")
    connect(logged_in(bob), oauth_server.pk, "bob-at-idp")
    cookies = {"alice": session_cookie(alice), "bob": session_cookie(bob)}

    async def as_user(name: str) -> str:
        async with Playground(cookies[name]) as ws:
            ended = await ws.call(oauth_server.pk, "whoami")
        return ended["result"]["content"][0]["text"]

    async def together():
        return await asyncio.gather(*(as_user(name) for name in ["alice", "bob"] * 4))

    seen = asyncio.run(together())
    assert seen == ["alice-at-idp", "bob-at-idp"] * 4
    tokens = Credential.objects.filter(server=oauth_server, kind="oauth")
    assert sorted(t.owner for t in tokens) == sorted([f"user:{alice.pk}", f"user:{bob.pk}"])


def test_a_team_connection_serves_members_without_their_own(alice, bob, oauth_server):
    client = logged_in(alice)
    started = client.post(f"/credentials/{oauth_server.pk}/connect/", {"next": "/credentials/", "for_team": "1"})
    from tests.oauth_helpers import approve, authorization_url

    client.get(approve(authorization_url(started), "team-robot"))
    assert call(bob, oauth_server, "whoami")["result"]["content"][0]["text"] == "team-robot"
    connect(logged_in(bob), oauth_server.pk, "bob-at-idp")
    assert call(bob, oauth_server, "whoami")["result"]["content"][0]["text"] == "bob-at-idp"
    # A member cannot connect for the team.
    refused = logged_in(bob).post(f"/credentials/{oauth_server.pk}/connect/", {"for_team": "1"}, follow=True)
    assert "Only the team" in refused.content.decode()


def _status_row(server, user):
    """What the worker reports about the connection, in either mode: its row (gone once closed)."""
    return ConnectionStatus.objects.filter(server=server, owner=f"user:{user.pk}").first()


def test_revoke_deletes_the_token_and_closes_the_workers_connection(alice, oauth_server):
    client = logged_in(alice)
    connect(client, oauth_server.pk, "alice-at-idp")
    first = call(alice, oauth_server, "whoami")
    assert first["status"] == "succeeded", first
    # The worker holds a live connection: its status row says so (the worker may be another process).
    eventually(lambda: (row := _status_row(oauth_server, alice)) is not None and row.status == "connected")
    if settings.EMBEDDED:  # the pool is in this process: look at it too
        assert len(live_keys(oauth_server.pk)) == 1

    row = Credential.objects.get(server=oauth_server, user=alice, kind="oauth")
    page = client.get("/credentials/tokens/").content.decode()
    assert "guarded" in page and "read" in page and "Revoke" in page
    client.post(f"/credentials/revoke/{row.pk}/", {"next": "/credentials/tokens/"})
    assert not Credential.objects.filter(pk=row.pk).exists()

    # The worker acts on the broadcast: it closes the connection, and closing removes its row.
    eventually(lambda: _status_row(oauth_server, alice) is None, timeout=10)
    if settings.EMBEDDED:
        assert not live_keys(oauth_server.pk), "the revoked connection stayed open"
    ended = call(alice, oauth_server, "whoami")
    assert ended["error_kind"] == "needs_auth", ended
