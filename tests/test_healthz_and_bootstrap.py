from __future__ import annotations

from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import call_command

from servers.models import Membership, Server
from sessions.worker import HEARTBEAT_KEY


@pytest.mark.django_db(transaction=True)
def test_healthz_is_200_when_database_channel_layer_broker_and_worker_are_up(client, worker):
    body = client.get("/healthz").json()
    assert body["ok"] is True
    assert all(body[part]["ok"] for part in ("database", "channel_layer", "broker", "worker"))


@pytest.mark.django_db(transaction=True)
def test_healthz_is_503_without_a_worker(client, worker):
    saved = cache.get(HEARTBEAT_KEY)
    cache.delete(HEARTBEAT_KEY)
    try:
        response = client.get("/healthz")
        # The worker may beat again between the delete and the check; then it is up, as it should say.
        if response.status_code == 200:
            assert response.json()["worker"]["ok"] is True
        else:
            assert response.status_code == 503
            assert response.json()["worker"] == {
                "ok": False,
                "error": "RuntimeError: no worker has reported in the last few seconds",
            }
    finally:
        if saved:
            cache.set(HEARTBEAT_KEY, saved, 30)


@pytest.mark.django_db
def test_bootstrap_creates_the_admin_once_and_registers_the_demo_server():
    out = StringIO()
    call_command("bootstrap", stdout=out)
    assert "username: admin" in out.getvalue() and "password: " in out.getvalue()
    assert Membership.objects.get(user__username="admin").role == "admin"
    demo = Server.objects.get()
    assert demo.name == "demo" and demo.args == ["-m", "sessions.mcp.demo_server"]

    again = StringIO()
    call_command("bootstrap", stdout=again)
    assert "password" not in again.getvalue()
    assert Server.objects.count() == 1
