"""Resource subscriptions on one live connection, in whichever way its protocol era allows.

Handshake era (2024-11-05 … 2025-11-25): `resources/subscribe` per URI, and the server's
`notifications/resources/updated` arrive on the connection's message handler.
2026-07-28: there is no subscribe request; one `subscriptions/listen` stream carries the
whole set of URIs, so a change to the set re-opens the stream with the new filter.

Each URI keeps the set of its subscribers (say, the browser sockets that asked): asking
twice is asking once, and the server is told only when the last subscriber leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from collections.abc import Awaitable, Callable

from mcp import Client
from mcp.client.subscriptions import ResourceUpdated, SubscriptionLost
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .failure import ConnectionFailed, Failure

log = logging.getLogger(__name__)
# resources/subscribe is deprecated only for 2026-07-28 connections, which never send it here.
warnings.filterwarnings("ignore", message="resources/(un)?subscribe is removed")

# (uri, "updated" | "ended", message): where news of a subscribed resource goes.
UpdateSink = Callable[[str, str, str], Awaitable[None]]


class ResourceSubscriptions:
    def __init__(self, client: Client, sink: UpdateSink):
        self.client = client
        self.sink = sink
        self.subscribers: dict[str, set[str]] = {}
        self._lock = asyncio.Lock()
        self._listener: asyncio.Task[None] | None = None

    @property
    def modern(self) -> bool:
        return self.client.protocol_version in MODERN_PROTOCOL_VERSIONS

    def offered(self) -> bool:
        resources = self.client.server_capabilities.resources if self.client.server_capabilities else None
        return bool(resources and resources.subscribe)

    async def add(self, uri: str, subscriber: str, sink: UpdateSink, timeout: float) -> None:
        if not self.offered():
            raise ConnectionFailed(Failure("not_offered", "The server does not offer resource subscriptions."))
        async with self._lock:
            # Connections are per user, so the newest sink reaches the same people as the old one.
            self.sink = sink
            if uri not in self.subscribers:
                if self.modern:
                    await self._relisten({*self.subscribers, uri}, timeout)
                else:
                    await asyncio.wait_for(self.client.subscribe_resource(uri), timeout)
            self.subscribers.setdefault(uri, set()).add(subscriber)

    async def remove(self, uri: str, subscriber: str, timeout: float) -> bool:
        """`subscriber` leaves `uri`; True when it was the last, and the server was told."""
        async with self._lock:
            left = self.subscribers.get(uri)
            if left is None or subscriber not in left:
                return False
            left.discard(subscriber)
            if left:
                return False
            del self.subscribers[uri]
            if self.modern:
                await self._relisten(set(self.subscribers), timeout)
            else:
                await asyncio.wait_for(self.client.unsubscribe_resource(uri), timeout)
            return True

    async def on_notification(self, uri: str) -> None:
        """A handshake-era `notifications/resources/updated`.

        In 2026-07-28 the SDK also hands listen-stream events to the message handler;
        the stream (`_listen`) reports those, so they are not reported twice.
        """
        if not self.modern and uri in self.subscribers:
            await self.sink(uri, "updated", "")

    async def _relisten(self, uris: set[str], timeout: float) -> None:
        old, self._listener = self._listener, None
        if old is not None:
            old.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await old
        if not uris:
            return
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._listener = asyncio.create_task(self._listen(sorted(uris), ready), name="mcp-resource-listen")
        await asyncio.wait_for(asyncio.shield(ready), timeout)

    async def _listen(self, uris: list[str], ready: asyncio.Future[None]) -> None:
        try:
            async with self.client.listen(resource_subscriptions=uris) as stream:
                ready.set_result(None)
                async for event in stream:
                    if isinstance(event, ResourceUpdated):
                        await self.sink(event.uri, "updated", "")
            reason = "The server closed the subscription."
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the subscribers must hear how it ended
            if not ready.done():
                ready.set_exception(exc)
                return
            reason = "The connection to the server ended." if isinstance(exc, SubscriptionLost) else str(exc)
        # The stream is gone: every subscription it carried ended with it.
        ended, self.subscribers = list(self.subscribers), {}
        for uri in ended:
            try:
                await self.sink(uri, "ended", reason)
            except Exception:  # noqa: BLE001 - one failing sink must not silence the rest
                log.warning("could not report the end of a subscription to %s", uri, exc_info=True)
