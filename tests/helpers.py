"""Small helpers many tests share: a logged-in test client, the demo server as a pool's config, a probe's
failure, a login, a person's team, the worker's open connections, waiting for the worker's records."""

from __future__ import annotations

import sys
import time

import pytest
from django.test import Client

from sessions.mcp.config import ServerConfig
from sessions.mcp.failure import ConnectionFailed
from sessions.mcp.pool import ConnectionPool
from sessions.mcp.ssrf import LOCAL_NETWORK
from tests.conftest import DEMO_ARGS, ROOT


def logged_in(user, **client_options) -> Client:
    """A Django test client with `user` logged in (client_options as for Client, e.g. enforce_csrf_checks)."""
    client = Client(**client_options)
    client.force_login(user)
    return client


def stdio_demo(**overrides) -> ServerConfig:
    """The demo server over stdio, as the pool is handed it (no Django): `overrides` are ServerConfig fields."""
    return ServerConfig(
        network=LOCAL_NETWORK,
        name="demo",
        transport="stdio",
        command=sys.executable,
        args=tuple(DEMO_ARGS),
        cwd=str(ROOT),
        **overrides,
    )


def probe_failure(pool: ConnectionPool, config: ServerConfig):
    """The Failure a probe of `config` ends with; the test fails if the probe connects."""
    with pytest.raises(ConnectionFailed) as caught:
        pool.run(pool.probe(config), timeout=60)
    return caught.value.failure


def login(client: Client, login: str, password: str, path: str = "/accounts/login/"):
    """Post the login form as a person types it (a username or an email address); the answer."""
    return client.post(path, {"login": login, "password": password})


def team_of(user):
    """The one team `user` is a member of."""
    return user.memberships.get().team


def live_keys(server_id: int, owner: str | None = None) -> list:
    """The in-process worker's open connections to this server (of `owner`, e.g. "user:7", if given), by key."""
    from sessions.worker import get_pool

    return [key for key in get_pool()._connections if key.server_id == server_id and owner in (None, key.owner)]


def eventually(check, timeout: float = 30) -> None:
    """Wait until `check()` holds (the worker records statuses beside the calls, not before they end);
    an AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("the worker did not record it")
        time.sleep(0.05)
