"""The portal as it is served, for attacks that must meet Daphne itself (its frame limits, its handshake)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests.conftest import PortalProcess, free_port


@pytest.fixture(scope="module")
def daphne_portal(django_db_setup, django_db_blocker, worker) -> Iterator[dict[str, Any]]:
    """`manage.py runportal` (Daphne, and in the embedded mode its worker threads) on a free port, on the
    test database; yields {"url", "ws", "origin", "log"}. Tests that use it need committed rows
    (`django_db(transaction=True)`), as the browser tests do."""
    from django.db import connection

    with django_db_blocker.unblock():
        db = dict(connection.settings_dict)
    port = free_port()
    portal = PortalProcess(db, Path(settings.VAR_DIR) / f"test-daphne-{port}.log", port=port)
    try:
        portal.start()
        yield {"url": portal.url, **portal.socket_address, "log": portal.log}
    finally:
        portal.stop()
        portal.log.unlink(missing_ok=True)


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
