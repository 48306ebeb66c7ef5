"""A person's calls in flight as their pages see them: after a reload, in a second tab.

Events go to every page of the person (the `user.<id>` group), but a page that opens late has
missed them. `in_flight` rebuilds what it missed from the records (the calls, their open forms
and sampling requests) and from the cache (each call's last progress, which is not a row:
a progress step is written nowhere else until the call ends). The cache is the process's own in
the embedded mode and Redis in the distributed one, so any daphne answers for any worker.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from django.core.cache import cache
from django.utils import timezone

from .mcp.elicitation import defaults
from .models import CallStatus, Elicitation, ElicitationState, SamplingRequest, SamplingState, ToolCall

log = logging.getLogger(__name__)

IN_FLIGHT = (CallStatus.PENDING, CallStatus.AWAITING_APPROVAL, CallStatus.RUNNING)
MAX_IN_FLIGHT = 50
# Longer than any call may run (the worker's backstop plus a few forms): the entry outlives the call.
PROGRESS_SECONDS = 6 * 3600


def _progress_key(call_id: str) -> str:
    return f"call-progress:{call_id}"


def remember_progress(call_id: str, progress: float, total: float | None, message: str | None) -> None:
    """Best effort, like the event it copies: a cache outage costs a reloaded page its progress bar."""
    try:
        cache.set(_progress_key(call_id), {"progress": progress, "total": total, "message": message}, PROGRESS_SECONDS)
    except Exception:  # noqa: BLE001 - see above
        log.warning("could not remember the progress of call %s", call_id, exc_info=True)


def elicitation_event(row: Elicitation) -> dict[str, Any]:
    """The `elicitation.requested` event the worker sent for this form (sessions/worker/conversation.py)."""
    event = {"type": "elicitation.requested", "call": str(row.call_id), "elicitation": str(row.id), "mode": row.mode}
    if row.mode == "url":
        return {
            **event,
            "message": row.message,
            "url": row.schema.get("url", ""),
            "elicitation_id": row.schema.get("elicitationId", ""),
        }
    return {**event, "message": row.message, "schema": row.schema, "defaults": defaults(row.schema)}


def sampling_event(row: SamplingRequest) -> dict[str, Any]:
    return {"type": "sampling.requested", "call": str(row.call_id), "sampling": str(row.id), "request": row.params}


def in_flight(user: Any) -> list[dict[str, Any]]:
    """The person's calls not yet ended, oldest first, each with what a page needs to show it."""
    calls = list(
        ToolCall.objects.filter(user=user, status__in=IN_FLIGHT)
        .only("id", "server_id", "server_name", "tool", "status", "arguments", "request_id", "task")
        .order_by("created_at")[:MAX_IN_FLIGHT]
    )
    if not calls:
        return []
    ids = [call.id for call in calls]
    forms: dict[str, list[dict[str, Any]]] = {}
    for form in Elicitation.objects.filter(call_id__in=ids, state=ElicitationState.PENDING).order_by("created_at"):
        forms.setdefault(str(form.call_id), []).append(elicitation_event(form))
    asked: dict[str, list[dict[str, Any]]] = {}
    for request in SamplingRequest.objects.filter(call_id__in=ids, state=SamplingState.PENDING).order_by("created_at"):
        asked.setdefault(str(request.call_id), []).append(sampling_event(request))
    try:
        progress = cache.get_many([_progress_key(str(call_id)) for call_id in ids])
    except Exception:  # noqa: BLE001 - the calls are still worth showing without their progress
        log.warning("could not read the progress of calls in flight", exc_info=True)
        progress = {}
    return [
        {
            "call": str(call.id),
            "server": call.server_id,
            "server_name": call.server_name,
            "tool": call.tool,
            "status": call.status,
            "arguments": call.arguments,
            "request_id": call.request_id,
            "task": call.task or None,
            "progress": progress.get(_progress_key(str(call.id))),
            "elicitations": forms.get(str(call.id), []),
            "sampling": asked.get(str(call.id), []),
        }
        for call in calls
    ]


# -- a connection's own log: what a server logs outside any call ------------------------------

SERVER_LOG_LINES = 50
MAX_LOG_DATA = 2_000  # characters of one line kept and sent: a log line is news, not a payload


def _server_log_key(server_id: int, owner: str) -> str:
    return f"server-log:{server_id}:{owner}"


def server_log_line(level: str, logger: str | None, data: Any) -> dict[str, Any]:
    text = data if isinstance(data, str) else json.dumps(data, default=str)
    return {"level": level, "logger": logger, "data": text[:MAX_LOG_DATA], "at": timezone.now().isoformat()}


def remember_server_log(server_id: int, owner: str, line: dict[str, Any]) -> None:
    """The last SERVER_LOG_LINES lines of the connection, for a server page opened later.

    Read and written back by the worker that holds the connection, the only writer of its log."""
    key = _server_log_key(server_id, owner)
    try:
        lines = [*(cache.get(key) or []), line][-SERVER_LOG_LINES:]
        cache.set(key, lines, PROGRESS_SECONDS)
    except Exception:  # noqa: BLE001 - the live event still goes; a later page misses the line
        log.warning("could not keep a log line of server %s", server_id, exc_info=True)


def server_log(server_id: int, owner: str) -> list[dict[str, Any]]:
    try:
        return cache.get(_server_log_key(server_id, owner)) or []
    except Exception:  # noqa: BLE001
        log.warning("could not read the log of server %s", server_id, exc_info=True)
        return []
