from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from io import StringIO

import pytest
from django.core.cache import cache
from django.core.management import call_command

from servers.models import Membership, Server
from sessions.affinity import HEARTBEAT_KEY


@pytest.mark.django_db(transaction=True)
def test_healthz_is_200_when_database_channel_layer_broker_and_worker_are_up(client, worker):
    body = client.get("/healthz").json()
    assert body["ok"] is True
    assert all(body[part]["ok"] for part in ("database", "channel_layer", "broker", "worker"))


@contextlib.contextmanager
def no_heartbeat(worker: dict) -> Iterator[None]:
    """The test's worker stops reporting in, for as long as the block lasts, and then reports again.

    Embedded: its heartbeat thread (in this process) is stopped and started again; distributed: the
    worker process is paused (SIGSTOP) and resumed. Either way no beat can land in the block.
    """
    from sessions import worker as worker_module

    process = worker.get("process")
    if process is not None:
        process.send_signal(signal.SIGSTOP)
        time.sleep(0.2)  # a beat it sent just before is in Redis before the heartbeat is deleted
    else:
        worker_module.stop_heartbeat()
    try:
        cache.delete(HEARTBEAT_KEY)
        assert cache.get(HEARTBEAT_KEY) is None
        yield
    finally:
        if process is not None:
            process.send_signal(signal.SIGCONT)
        else:
            worker_module.start_heartbeat()


@pytest.mark.django_db(transaction=True)
def test_healthz_is_503_without_a_worker(client, worker):
    with no_heartbeat(worker):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["ok"] is False
    assert response.json()["worker"] == {
        "ok": False,
        "error": "RuntimeError: no worker has reported in the last few seconds",
    }
    assert all(response.json()[part]["ok"] for part in ("database", "channel_layer", "broker"))
    # Reporting in again, the worker is seen again.
    deadline = time.monotonic() + 30
    while cache.get(HEARTBEAT_KEY) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert client.get("/healthz").status_code == 200


@pytest.mark.django_db
def test_bootstrap_creates_the_admin_once_and_registers_the_demo_server():
    out = StringIO()
    call_command("bootstrap", stdout=out)
    assert "username: admin" in out.getvalue() and "password: " in out.getvalue()
    membership = Membership.objects.select_related("user").get(user__username="admin")
    # The operator: a superuser (the Django admin within reach) and admin of the default team.
    assert membership.role == "admin" and membership.user.is_superuser and membership.user.is_staff
    demo = Server.objects.get()
    assert demo.name == "demo" and demo.args == ["-m", "sessions.mcp.demo_server"]

    again = StringIO()
    call_command("bootstrap", stdout=again)
    assert "password" not in again.getvalue()
    assert Server.objects.count() == 1
