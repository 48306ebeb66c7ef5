"""Attacks on `${…}` expansion: a member's secret that looks like a variable, and a team admin's
`${VAR}` reaching for the portal's environment. Real servers: a stdio server that writes down what
it was started with, and a loopback HTTP listener that records the headers it receives."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servers.models import Server
from sessions import credentials, worker
from sessions.mcp.pool import ConnectionPool, PoolSettings
from tests.conftest import ROOT
from tests.helpers import logged_in
from tests.test_secrets_never_leak import database_text
from tests.test_server_registry import stdio_form
from tests.ws import Playground, session_cookie

REAL_KEY = "the-real-django-key-0451-do-not-leak"
FAKE_VALUE = "fake-key-value-from-the-portal-env-1729"


@pytest.fixture
def recording(alice, tmp_path):
    """A stdio server whose env and argument take the member's ${secret:PORT}; it writes down its argv and env."""
    record = tmp_path / "started-with.json"
    server = Server.objects.create(
        team=alice.memberships.get().team,
        name="recorder",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.servers.hostile_server", "--record", str(record), "--port=${secret:PORT}"],
        env={"HOSTILE_SECRET": "${secret:PORT}"},
        cwd=str(ROOT),
        protocol="legacy",
        request_timeout=15,
        created_by=alice,
    )
    return server, record


def set_port(user, server, value: str) -> None:
    response = logged_in(user).post(f"/credentials/{server.pk}/secret/", {"name": "PORT", "value": value})
    assert response.status_code in (200, 302)


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_a_members_secret_naming_a_variable_reaches_the_server_as_written(bob, recording, monkeypatch):
    server, record = recording
    monkeypatch.setenv("DJANGO_SECRET_KEY", REAL_KEY)
    set_port(bob, server, "${DJANGO_SECRET_KEY}")
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(server.pk, "fail")
            return ended, ws.seen

    ended, frames = asyncio.run(scenario())
    started_with = json.loads(record.read_text())
    assert started_with["env"]["HOSTILE_SECRET"] == "${DJANGO_SECRET_KEY}"
    assert "--port=${DJANGO_SECRET_KEY}" in started_with["argv"]
    assert ended["status"] == "failed" and "${secret:PORT}" in ended["error"], ended
    # The real key is nowhere: not sent, not in the call record, its error, the audit, the status.
    assert REAL_KEY not in record.read_text()
    assert REAL_KEY not in json.dumps(frames)
    assert REAL_KEY not in database_text()


@pytest.mark.django_db
def test_the_real_wiring_fills_each_reference_once_even_with_the_variable_exposed(
    bob, recording, settings, monkeypatch
):
    """Server row → to_config → prepare → the pool → a real stdio server that reports what it got."""
    server, record = recording
    settings.PORTAL_SERVER_VARIABLES = ["DJANGO_SECRET_KEY", "PORTAL_TEST_GREETING"]
    monkeypatch.setenv("DJANGO_SECRET_KEY", REAL_KEY)
    monkeypatch.setenv("PORTAL_TEST_GREETING", "hello-from-the-operator")
    server.args = [
        *server.args,
        "--greeting=${PORTAL_TEST_GREETING}",
        "--fallback=${NOT_EXPOSED:-${PORTAL_TEST_GREETING}}",
    ]
    server.save()
    set_port(bob, server, "${DJANGO_SECRET_KEY}")

    prepared = credentials.prepare(server, bob.pk)
    assert prepared.failure is None
    pool = ConnectionPool(PoolSettings(health_seconds=0))
    try:
        tools = pool.run(pool.list_tools(prepared.key, prepared.config), timeout=60)
    finally:
        pool.shutdown()
    assert tools
    started_with = json.loads(record.read_text())
    # The secret's value is sent as written, though it names an exposed variable ...
    assert started_with["env"]["HOSTILE_SECRET"] == "${DJANGO_SECRET_KEY}"
    assert "--port=${DJANGO_SECRET_KEY}" in started_with["argv"]
    # ... an exposed variable is filled in, and a default is literal text.
    assert "--greeting=hello-from-the-operator" in started_with["argv"]
    assert "--fallback=${PORTAL_TEST_GREETING}" in started_with["argv"]
    assert REAL_KEY not in record.read_text()


class Listener:
    """A loopback HTTP server that records the headers of every request; it answers 404."""

    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []
        seen = self.headers

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                seen.append(dict(self.headers.items()))
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = do_DELETE = _record

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/mcp"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    listener = Listener()
    yield listener
    listener.close()


@pytest.fixture
def leaky(alice, listener):
    """An HTTP server whose header reaches for the portal's environment (registered before the form
    refused such names, or through an import)."""
    return Server.objects.create(
        team=alice.memberships.get().team,
        name="leaky",
        transport="http",
        url=listener.url,
        headers={"X-Leak": "${FAKE_KEY}"},
        request_timeout=5,
        created_by=alice,
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_an_admins_header_cannot_read_the_portals_environment(alice, leaky, listener, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", FAKE_VALUE)
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send({"type": "test_connection", "server": leaky.pk})
            tested = await ws.until("connection.tested", server=leaky.pk)
            ended = await ws.call(leaky.pk, "anything")
            return tested, ended, ws.seen

    tested, ended, frames = asyncio.run(scenario())
    assert tested["ok"] is False and tested["kind"] == "variable_not_available", tested
    assert "${FAKE_KEY} in the header X-Leak is not available to servers" in tested["message"]
    assert ended["status"] == "failed" and ended["error_kind"] == "variable_not_available", ended
    assert listener.headers == []  # refused before connecting: nothing was sent anywhere
    assert FAKE_VALUE not in json.dumps(frames) and FAKE_VALUE not in database_text()


@pytest.mark.django_db
def test_a_variable_the_operator_exposes_is_sent(alice, leaky, listener, monkeypatch, settings):
    monkeypatch.setenv("FAKE_KEY", FAKE_VALUE)
    settings.PORTAL_SERVER_VARIABLES = ["FAKE_KEY"]
    worker.execute_test_connection(leaky.pk, alice.pk)  # the worker's own code path, in this process
    leaky.refresh_from_db()
    assert leaky.last_test["ok"] is False  # a 404 is no MCP server; what matters is what it was sent
    assert any(headers.get("X-Leak") == FAKE_VALUE for headers in listener.headers), listener.headers


@pytest.mark.django_db
def test_the_form_refuses_a_variable_the_operator_does_not_expose(alice, settings, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", FAKE_VALUE)
    team = alice.memberships.get().team
    form = stdio_form(team, transport="http", url="http://127.0.0.1:9/mcp", headers="X-Leak: ${FAKE_KEY}")
    response = logged_in(alice).post("/servers/add/", form)
    assert response.status_code == 200 and not Server.objects.filter(name="demo").exists()
    assert "${FAKE_KEY} is not available to servers" in response.content.decode()
    stdio = stdio_form(team, args="--token\n${FAKE_KEY}", env="A=${PORTAL_OTHER}")
    page = logged_in(alice).post("/servers/add/", stdio).content.decode()
    assert "${FAKE_KEY} is not available to servers" in page and "${PORTAL_OTHER} is not available" in page
    # Listed by the operator, the same form is accepted; a default needs nothing exposed.
    settings.PORTAL_SERVER_VARIABLES = ["FAKE_KEY"]
    form["headers"] = "X-Leak: ${FAKE_KEY}\nX-Mode: ${NOT_EXPOSED:-plain}"
    assert logged_in(alice).post("/servers/add/", form).status_code == 302
    assert Server.objects.get(name="demo").headers == {"X-Leak": "${FAKE_KEY}", "X-Mode": "${NOT_EXPOSED:-plain}"}
