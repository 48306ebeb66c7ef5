"""The admin's OAuth settings: pre-registered client (secret encrypted), https-only metadata URL."""

from __future__ import annotations

import pytest
from django.test import Client

from servers.credentials.models import ServerOAuth

pytestmark = pytest.mark.django_db


def test_an_admin_sets_a_pre_registered_client_and_the_secret_is_sealed(alice, oauth_server):
    client = Client()
    client.force_login(alice)
    url = f"/servers/{oauth_server.pk}/oauth/"
    refused = client.post(
        url,
        {
            "enabled": "on",
            "metadata_url": "http://as.example/.well-known/x",
            "token_endpoint_auth_method": "client_secret_basic",
        },
    )
    assert "must be https" in refused.content.decode()
    saved = client.post(
        url,
        {
            "enabled": "on",
            "client_id": "portal-client",
            "client_secret": "shh-client-secret-1",
            "token_endpoint_auth_method": "client_secret_post",
            "metadata_url": "https://as.example/.well-known/oauth-authorization-server",
        },
    )
    assert saved.status_code == 302
    row = ServerOAuth.objects.get(server=oauth_server)
    assert row.client_id == "portal-client" and "shh-client-secret-1" not in row.client_secret_ciphertext
    assert row.client_secret() == "shh-client-secret-1"
    assert "shh-client-secret-1" not in client.get(url).content.decode()


def test_members_cannot_change_oauth_settings(bob, oauth_server):
    client = Client()
    client.force_login(bob)
    assert client.get(f"/servers/{oauth_server.pk}/oauth/").status_code == 403


def test_connect_your_account_is_offered_only_where_the_server_uses_oauth(alice, demo_server):
    from servers.models import Server

    team = alice.memberships.get().team
    untested = Server.objects.create(team=team, name="plain", transport="http", url="https://plain.example/mcp")
    refused = Server.objects.create(
        team=team,
        name="guarded",
        transport="http",
        url="https://guarded.example/mcp",
        last_test={"ok": False, "kind": "needs_auth", "message": "HTTP 401 from …", "status_code": 401},
    )
    keyed = Server.objects.create(
        team=team,
        name="keyed",
        transport="http",
        url="https://keyed.example/mcp",
        headers={"X-Key": "${secret:KEY}"},
        last_test={"ok": False, "kind": "needs_auth", "message": "Connect your account: set KEY for keyed."},
    )
    configured = Server.objects.create(team=team, name="configured", transport="http", url="https://c.example/mcp")
    ServerOAuth.objects.create(server=configured, client_id="portal-client")
    client = Client()
    client.force_login(alice)
    page = client.get("/credentials/").content.decode()

    def row(server) -> str:
        return page.split(f'<tr id="server-{server.pk}">')[1].split("</tr>")[0]

    assert 'id="credential-list"' in page and '<section class="card"' not in page, "one compact list"
    for offered in (refused, configured):
        assert "Connect your account" in row(offered), offered.name
    for not_offered in (untested, keyed, demo_server):
        assert "Connect your account" not in row(not_offered), not_offered.name
    assert "<code>KEY</code>" in row(keyed) and "Nothing from you." in row(untested)
