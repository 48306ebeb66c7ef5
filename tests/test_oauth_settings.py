"""The admin's OAuth settings: pre-registered client (secret encrypted), https-only metadata URL."""

from __future__ import annotations

import pytest
from django.test import Client

from servers.credential_models import ServerOAuth

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
