"""Static secrets: ${secret:NAME} in a server's config, filled in per user at connect time."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
from django.test import Client

from servers.credentials.models import Credential
from sessions.mcp.config import ServerConfig
from sessions.mcp.secrets import MissingSecrets, redact, referenced_secrets
from sessions.mcp.variables import expand_config
from tests.ws import call


def test_it_expands_references_everywhere_a_config_holds_text():
    config = ServerConfig(
        name="x",
        transport="http",
        url="https://h/mcp?key=${secret:KEY}",
        args=("--token=${secret:TOKEN}",),
        headers={"Authorization": "Bearer ${secret:TOKEN}"},
        env={"A": "${secret:KEY}-suffix"},
    )
    assert referenced_secrets(config) == {"KEY", "TOKEN"}
    filled = expand_config(dataclasses.replace(config, secrets={"KEY": "k-123456", "TOKEN": "t-abcdef"}))
    assert filled.url == "https://h/mcp?key=k-123456"
    assert filled.headers == {"Authorization": "Bearer t-abcdef"}
    assert filled.args == ("--token=t-abcdef",) and filled.env == {"A": "k-123456-suffix"}
    assert config.headers == {"Authorization": "Bearer ${secret:TOKEN}"}  # the original is untouched
    with pytest.raises(MissingSecrets) as missing:
        expand_config(dataclasses.replace(config, secrets={"KEY": "k"}))
    assert missing.value.names == ["TOKEN"]


def test_redaction_replaces_values_with_their_reference():
    assert (
        redact("GET https://h/?key=k-123456 failed", {"KEY": "k-123456"}) == "GET https://h/?key=${secret:KEY} failed"
    )
    assert redact("yes", {"SHORT": "yes"}) == "yes"  # too short to redact safely


@pytest.fixture
def keyed_server(demo_server):
    demo_server.env = {"DEMO_KEY": "${secret:DEMO_KEY}"}
    demo_server.save()
    return demo_server


def set_secret(user, server, value: str, for_team: bool = False):
    client = Client()
    client.force_login(user)
    data = {"name": "DEMO_KEY", "value": value, **({"for_team": "1"} if for_team else {})}
    return client.post(f"/credentials/{server.pk}/secret/", data, follow=True)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_each_user_connects_with_their_own_value_or_the_teams(alice, bob, keyed_server):
    unset = call(bob, keyed_server, "env_digest", name="DEMO_KEY")
    assert unset["error_kind"] == "needs_auth" and "set DEMO_KEY" in unset["error"]

    page = set_secret(alice, keyed_server, "team-value-123456", for_team=True)
    assert "Saved the team&#x27;s DEMO_KEY" in page.content.decode()
    assert set_secret(bob, keyed_server, "x", for_team=True).status_code == 200  # refused: not an admin
    assert not Credential.objects.filter(team__isnull=False, set_by=bob).exists()

    shared = call(bob, keyed_server, "env_digest", name="DEMO_KEY")
    assert shared["result"]["content"][0]["text"] == hashlib.sha256(b"team-value-123456").hexdigest()

    set_secret(bob, keyed_server, "bobs-own-value-789")
    own = call(bob, keyed_server, "env_digest", name="DEMO_KEY")  # a changed secret: a fresh connection
    assert own["result"]["content"][0]["text"] == hashlib.sha256(b"bobs-own-value-789").hexdigest()
    still_team = call(alice, keyed_server, "env_digest", name="DEMO_KEY")
    assert still_team["result"]["content"][0]["text"] == hashlib.sha256(b"team-value-123456").hexdigest()


@pytest.mark.django_db
def test_my_credentials_shows_names_and_state_never_values(alice, bob, keyed_server):
    set_secret(alice, keyed_server, "alice-value-424242")
    client = Client()
    client.force_login(alice)
    page = client.get("/credentials/").content.decode()
    assert "DEMO_KEY" in page and "set" in page and "alice-value-424242" not in page
    bobs = Client()
    bobs.force_login(bob)
    page = bobs.get("/credentials/").content.decode()
    assert "needs your credentials" in page
    # Bob cannot remove Alice's value.
    row = Credential.objects.get(user=alice)
    assert bobs.post(f"/credentials/revoke/{row.pk}/").status_code == 404
    assert Credential.objects.filter(pk=row.pk).exists()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_a_tampered_value_is_a_clear_error_and_never_sent(alice, bob, keyed_server):
    set_secret(alice, keyed_server, "alice-value-111111")
    set_secret(bob, keyed_server, "bobs-value-2222222")
    # Bob's ciphertext copied into Alice's row: authentic, but sealed for another row.
    Credential.objects.filter(user=alice).update(ciphertext=Credential.objects.get(user=bob).ciphertext)
    ended = call(alice, keyed_server, "env_digest", name="DEMO_KEY")
    assert ended["status"] == "failed" and ended["error_kind"] == "needs_auth", ended
    assert "credential unreadable, connect again" in ended["error"]
    set_secret(alice, keyed_server, "alice-value-333333")  # setting it again repairs it
    fixed = call(alice, keyed_server, "env_digest", name="DEMO_KEY")
    assert fixed["result"]["content"][0]["text"] == hashlib.sha256(b"alice-value-333333").hexdigest()
