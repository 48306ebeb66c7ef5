"""Writes that matter for live use: starting and finishing tool calls."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from servers.models import Server

from .mcp.errors import Failure
from .models import CallStatus, ConnectionStatus, Elicitation, ElicitationState, ToolCall


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
    from . import affinity
    from .tasks import run_tool_call

    # To the worker that holds this user's session with the server, if one does (sessions/affinity.py).
    key = affinity.connection_key_for(server, user.pk)
    transaction.on_commit(lambda: affinity.send(run_tool_call, key, (str(call.id),), backup=True))
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
    full_output: bytes | None = None,
    error: str = "",
    error_kind: str = "",
    details: dict[str, Any] | None = None,
    duration_ms: float | None = None,
    worker: str | None = None,
) -> ToolCall:
    extra = {"worker": worker} if worker else {}
    ToolCall.objects.filter(pk=call_id).update(
        **extra,
        status=status,
        result=result,
        full_output=full_output,
        error=error,
        error_kind=error_kind,
        details=details or {},
        duration_ms=duration_ms,
        finished_at=timezone.now(),
    )
    return ToolCall.objects.get(pk=call_id)


def do_set_connection_status(
    server_id: int, owner: str, status: str, failure: Failure | None, worker: str
) -> dict[str, Any] | None:
    """Record what a worker's pool says about one connection; returns the browser event, if any.

    "closed" removes the row, unless another worker has since taken the connection over.
    """
    if status == "closed":
        deleted, _ = ConnectionStatus.objects.filter(server_id=server_id, owner=owner, worker=worker).delete()
        return {"type": "connection.status", "server": server_id, "status": "closed"} if deleted else None
    if not Server.objects.filter(pk=server_id).exists():
        return None
    row, _ = ConnectionStatus.objects.update_or_create(
        server_id=server_id,
        owner=owner,
        defaults={
            "status": status,
            "error_kind": failure.kind if failure else "",
            "error": failure.message if failure else "",
            "worker": worker,
        },
    )
    return row.as_event()


def do_record_call_channel(call_id: str, channel: str) -> None:
    """Where the worker running the call listens, so Cancel and answers reach it."""
    ToolCall.objects.filter(pk=call_id).update(channel=channel)


@transaction.atomic
def do_request_elicitation(call_id: str, request_id: str, message: str, schema: dict[str, Any]) -> Elicitation:
    return Elicitation.objects.create(call_id=call_id, request_id=request_id, message=message, schema=schema)


def do_answer_elicitation(elicitation_id: Any, state: str, response: dict[str, Any] | None = None) -> bool:
    """Pending → answered, once: a second answer (or one after the timeout) changes nothing."""
    answered = Elicitation.objects.filter(pk=elicitation_id, state=ElicitationState.PENDING).update(
        state=state, response=response, answered_at=timezone.now()
    )
    return answered == 1


@transaction.atomic
def do_close_elicitations(call_id: str) -> list[str]:
    """The call ended with forms still open: they are closed as cancelled; their ids are returned."""
    pending = Elicitation.objects.select_for_update().filter(call_id=call_id, state=ElicitationState.PENDING)
    ids = [str(pk) for pk in pending.values_list("pk", flat=True)]
    Elicitation.objects.filter(pk__in=ids).update(state=ElicitationState.CANCELLED, answered_at=timezone.now())
    return ids
