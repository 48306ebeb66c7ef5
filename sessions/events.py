"""The one door to browsers: every event a page hears leaves through here.

A person's pages share a channel-layer group (`user.<id>`); the consumer joins it, and whatever
process learns news (a worker, a view, an action) sends to it. Events are best effort: the record in
the database is the truth, an event only news of it, so a page that missed one finds it again in the
history or by asking (docs/websocket-protocol.md). Workers have a group of their own, for news meant
for whichever worker holds a connection (a credential changed).
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

log = logging.getLogger(__name__)

WORKERS_GROUP = "portal.workers"


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def message(event: dict[str, Any]) -> dict[str, Any]:
    """The channel-layer message that carries `event` to a page (the consumer's portal_event)."""
    return {"type": "portal.event", "event": event}


async def publish(user_id: int, event: dict[str, Any]) -> None:
    """To every page of the person, from async code (the worker's loop).

    A channel layer that lost its Redis (a restart) fails the first send on each stale pooled
    connection; one more try gets a fresh one. If that fails too, the event is dropped (logged):
    a page that missed it finds the call's end in the history, and a call never fails for it.
    """
    for attempt in (1, 2):
        try:
            await get_channel_layer().group_send(user_group(user_id), message(event))
            return
        except Exception:  # noqa: BLE001 - see above
            if attempt == 2:
                log.warning("could not send a %s event to user %s", event.get("type"), user_id, exc_info=True)


def publish_on_commit(user_id: int, event: dict[str, Any]) -> None:
    """From sync code that changed a record: sent once the change is committed, never before it."""
    transaction.on_commit(lambda: async_to_sync(publish)(user_id, event))


def tell_workers(news: dict[str, Any]) -> None:
    """To every worker process, now (sessions/credentials.py listens)."""
    async_to_sync(get_channel_layer().group_send)(WORKERS_GROUP, news)
