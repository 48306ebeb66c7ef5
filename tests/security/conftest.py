"""The portal as it is served, for attacks that must meet Daphne itself (its frame limits, its handshake)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.browser.conftest import _portal_env, _wait_until_healthy
from tests.conftest import ROOT, free_port, stop, wait_for_port


@pytest.fixture(scope="module")
def daphne_portal(django_db_setup, django_db_blocker, worker) -> Iterator[dict[str, Any]]:
    """`manage.py runportal` (Daphne, and in the embedded mode its worker threads) on a free port, on the
    test database; yields {"url", "ws", "origin", "log"}. Tests that use it need committed rows
    (`django_db(transaction=True)`), as the browser tests do."""
    from django.db import connection

    with django_db_blocker.unblock():
        db = dict(connection.settings_dict)
    port = free_port()
    log_path = Path(settings.VAR_DIR) / f"test-daphne-{port}.log"
    log = open(log_path, "w")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runportal", "--port", str(port)],
        cwd=ROOT,
        env=_portal_env(db),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_port(port, timeout=60, process=process)
        _wait_until_healthy(url, process)
        yield {"url": url, "ws": f"ws://127.0.0.1:{port}/ws/playground/", "origin": url, "log": log_path}
    finally:
        stop(process)
        log.close()
        log_path.unlink(missing_ok=True)


class DaphneSocket:
    """The playground socket through real Daphne, with the `websockets` client:
    `async with DaphneSocket(portal, cookie) as ws:`."""

    def __init__(self, portal: dict[str, Any], cookie: bytes | None, origin: str | None = None):
        self.portal, self.cookie = portal, cookie
        self.origin = origin or portal["origin"]
        self.socket: Any = None

    async def __aenter__(self) -> DaphneSocket:
        await self.reopen()
        return self

    async def reopen(self) -> None:
        """A new connection, as the page makes after its socket closed."""
        from websockets.asyncio.client import connect

        headers = {"Cookie": self.cookie.decode()} if self.cookie else {}
        self.socket = await connect(
            self.portal["ws"], origin=self.origin, additional_headers=headers, max_size=None, open_timeout=20
        )

    async def __aexit__(self, *exc: object) -> None:
        await self.socket.close()

    async def send(self, message: Any) -> None:
        await self.socket.send(message if isinstance(message, (str, bytes)) else json.dumps(message))

    async def receive(self, timeout: float = 20) -> dict[str, Any]:
        import asyncio

        return json.loads(await asyncio.wait_for(self.socket.recv(), timeout))
