"""Tokens that outlive the worker that got them, refreshed once however many processes want them."""

from __future__ import annotations

import pytest

from servers.credentials.models import Credential
from tests.helpers import logged_in
from tests.oauth_helpers import connect, control, expire_stored_token, stats, worker_processes
from tests.ws import call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def delta(before: dict, after: dict, name: str) -> int:
    return after.get(name, 0) - before.get(name, 0)


@pytest.fixture
def connected(alice, oauth_server):
    connect(logged_in(alice), oauth_server.pk, "alice-at-idp")
    return Credential.objects.get(server=oauth_server, user=alice, kind="oauth")


def test_a_restarted_worker_refreshes_instead_of_asking_for_a_new_login(alice, oauth_server, oauth_base, connected):
    expire_stored_token(connected)
    before = stats(oauth_base)
    [outcome] = worker_processes(oauth_server.pk, alice.pk, 1, tool="whoami")
    after = stats(oauth_base)
    assert outcome["ok"], outcome
    assert outcome["result"]["content"][0]["text"] == "alice-at-idp"
    assert delta(before, after, "token_refresh") == 1
    assert delta(before, after, "authorize") == 0 and delta(before, after, "token_code") == 0
    connected.refresh_from_db()
    assert connected.refreshed_at is not None and connected.has_tokens


def test_two_processes_refreshing_at_once_send_one_refresh(alice, oauth_server, oauth_base, connected):
    # The server takes its time, so both processes are inside their refresh window together;
    # it also rotates refresh tokens, so a second refresh with the old one would be refused.
    control(oauth_base, refresh_delay=0.5)
    expire_stored_token(connected)
    before = stats(oauth_base)
    outcomes = worker_processes(oauth_server.pk, alice.pk, 2, tool="whoami")
    after = stats(oauth_base)
    assert [o["ok"] for o in outcomes] == [True, True], outcomes
    assert delta(before, after, "token_refresh") == 1
    assert delta(before, after, "refresh_refused") == 0


@pytest.mark.parametrize(
    ("error", "status"),
    [("invalid_refresh_token", 400), ("expired_refresh_token", 400), ("token_expired", 401), ("invalid_grant", 200)],
)
def test_a_refused_refresh_means_connect_again_and_is_not_retried(
    alice, oauth_server, oauth_base, connected, error, status
):
    control(oauth_base, refresh_error=error, refresh_status=status)
    token = connected.open_json()["tokens"]["access_token"]  # the server would still take it
    expire_stored_token(connected)
    ended = call(alice, oauth_server, "whoami")
    assert ended["status"] == "failed" and ended["error_kind"] == "needs_auth", ended
    connected.refresh_from_db()
    assert not connected.has_tokens and "invalid_grant" in connected.last_error

    # Known to need authorization: the next call does not even ask the server, with the old token
    # or without one. (Connections of earlier tests still hold valid tokens of their own, and may
    # use them meanwhile: the server's whole count of requests let in is not this call's.)
    before, before_with_token = stats(oauth_base), stats(oauth_base, token)
    again = call(alice, oauth_server, "whoami")
    assert again["error_kind"] == "needs_auth"
    assert stats(oauth_base, token) == before_with_token
    after = stats(oauth_base)
    assert {k: v for k, v in after.items() if k != "mcp_ok"} == {k: v for k, v in before.items() if k != "mcp_ok"}

    control(oauth_base, refresh_error=None)
    connect(logged_in(alice), oauth_server.pk, "alice-at-idp")
    ended = call(alice, oauth_server, "whoami")
    assert ended["status"] == "succeeded", ended


def test_step_up_asks_for_the_union_of_scopes(alice, oauth_server, oauth_base, connected):
    denied = call(alice, oauth_server, "admin_op")
    assert denied["error_kind"] == "needs_auth", denied
    connect(logged_in(alice), oauth_server.pk, "alice-at-idp")
    connected.refresh_from_db()
    assert set(connected.scope.split()) == {"read", "admin"}
    ended = call(alice, oauth_server, "admin_op")
    assert ended["status"] == "succeeded", ended
    assert ended["result"]["content"][0]["text"] == "admin done for alice-at-idp"
