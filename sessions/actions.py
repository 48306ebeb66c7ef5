"""Writes that matter for live use: starting and finishing tool calls."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from servers.models import Server

from .models import CallStatus, ToolCall


@transaction.atomic
def do_start_tool_call(user: Any, server_id: Any, tool: str, arguments: dict[str, Any]) -> ToolCall:
    """Record the call and hand it to a worker once the record is committed.

    A call that cannot start (a server the user cannot see, or a disabled one) is
    still recorded, as rejected, so every attempt leaves a trace.
    """
    server = Server.objects.visible_to(user).filter(pk=server_id).first() if isinstance(server_id, int) else None
    call = ToolCall(user=user, server=server, server_name=server.name if server else "", tool=tool, arguments=arguments)
    if server is None:
        call.status, call.error, call.error_kind = CallStatus.REJECTED, "Unknown server.", "unknown_server"
    elif not server.enabled:
        call.status, call.error, call.error_kind = CallStatus.REJECTED, f"{server.name} is disabled.", "server_disabled"
    if call.status == CallStatus.REJECTED:
        call.finished_at = timezone.now()
        call.save()
        return call
    call.save()
    from .tasks import run_tool_call

    transaction.on_commit(lambda: run_tool_call.delay(str(call.id)))
    return call


def do_claim_tool_call(call_id: str, worker: str) -> bool:
    """Pending → running, once: a task delivered twice must not call the tool twice."""
    claimed = ToolCall.objects.filter(pk=call_id, status=CallStatus.PENDING).update(
        status=CallStatus.RUNNING, started_at=timezone.now(), worker=worker
    )
    return claimed == 1


def do_finish_tool_call(
    call_id: str,
    status: str,
    *,
    result: dict[str, Any] | None = None,
    error: str = "",
    error_kind: str = "",
    details: dict[str, Any] | None = None,
    duration_ms: float | None = None,
    call: ToolCall | None = None,
) -> ToolCall:
    """Record how the call ended. A caller that holds the row passes it as `call`: it is
    updated in memory and returned, instead of read back (one query less per call)."""
    fields = {
        "status": status,
        "result": result,
        "error": error,
        "error_kind": error_kind,
        "details": details or {},
        "duration_ms": duration_ms,
        "finished_at": timezone.now(),
    }
    ToolCall.objects.filter(pk=call_id).update(**fields)
    if call is None:
        return ToolCall.objects.get(pk=call_id)
    for name, value in fields.items():
        setattr(call, name, value)
    return call
