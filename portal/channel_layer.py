"""An in-memory channel layer that is safe to use from several threads and event loops.

In the embedded mode the Celery worker threads publish tool-call events from the
MCP pool's own loop, while consumers wait on Daphne's loop. Channels' own
InMemoryChannelLayer hands messages over with asyncio.Queue, which is not
thread-safe: a put from a foreign loop may never wake the waiting consumer. Here
every hand-over to a waiting receiver goes through its loop's call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import random
import string
import threading
import time
from collections import deque
from copy import deepcopy
from typing import Any

from channels.exceptions import ChannelFull
from channels.layers import BaseChannelLayer


class _Inbox:
    def __init__(self) -> None:
        self.messages: deque[tuple[float, dict[str, Any]]] = deque()
        self.waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()


class EmbeddedChannelLayer(BaseChannelLayer):
    extensions = ["groups", "flush"]

    def __init__(self, expiry: int = 60, group_expiry: int = 86400, capacity: int = 1000, **kwargs: Any):
        super().__init__(expiry=expiry, capacity=capacity, **kwargs)
        self.group_expiry = group_expiry
        self._lock = threading.Lock()
        self._inboxes: dict[str, _Inbox] = {}
        self._groups: dict[str, dict[str, float]] = {}

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        assert isinstance(message, dict), "message is not a dict"
        self.require_valid_channel_name(channel)
        with self._lock:
            inbox = self._inboxes.setdefault(channel, _Inbox())
            if len(inbox.messages) >= self.get_capacity(channel):
                raise ChannelFull(channel)
            inbox.messages.append((time.time() + self.expiry, deepcopy(message)))
            self._wake_one(inbox)

    @staticmethod
    def _wake_one(inbox: _Inbox) -> None:
        while inbox.waiters:
            loop, waiter = inbox.waiters.popleft()
            if loop.is_closed():
                continue
            loop.call_soon_threadsafe(_resolve, waiter)
            return

    async def receive(self, channel: str) -> dict[str, Any]:
        self.require_valid_channel_name(channel)
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                inbox = self._inboxes.setdefault(channel, _Inbox())
                now = time.time()
                while inbox.messages and inbox.messages[0][0] < now:
                    inbox.messages.popleft()
                if inbox.messages:
                    _, message = inbox.messages.popleft()
                    if inbox.messages:
                        self._wake_one(inbox)
                    return message
                waiter: asyncio.Future[None] = loop.create_future()
                inbox.waiters.append((loop, waiter))
            try:
                await waiter
            except asyncio.CancelledError:
                with self._lock:
                    try:
                        inbox.waiters.remove((loop, waiter))
                    except ValueError:
                        # Already woken for a message: pass the turn on so it is not stranded.
                        self._wake_one(inbox)
                raise

    async def new_channel(self, prefix: str = "specific.") -> str:
        return f"{prefix}.inmemory!{''.join(random.choice(string.ascii_letters) for _ in range(12))}"

    async def flush(self) -> None:
        with self._lock:
            self._inboxes.clear()
            self._groups.clear()

    async def close(self) -> None:
        pass

    async def group_add(self, group: str, channel: str) -> None:
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        with self._lock:
            self._groups.setdefault(group, {})[channel] = time.time()

    async def group_discard(self, group: str, channel: str) -> None:
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        with self._lock:
            members = self._groups.get(group)
            if members is not None:
                members.pop(channel, None)
                if not members:
                    del self._groups[group]

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.require_valid_group_name(group)
        cutoff = time.time() - self.group_expiry
        with self._lock:
            channels = [name for name, joined in self._groups.get(group, {}).items() if joined >= cutoff]
        for channel in channels:
            try:
                await self.send(channel, message)
            except ChannelFull:
                pass  # as in Channels' layers: one full channel must not block the group


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
