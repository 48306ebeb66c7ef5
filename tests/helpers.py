"""Small helpers many tests share: a logged-in test client, the demo server as a pool's config, a probe's failure."""

from __future__ import annotations

import sys

import pytest
from django.test import Client

from sessions.mcp.config import ServerConfig
from sessions.mcp.errors import ConnectionFailed
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
