"""What every fault test checks after the fault: nothing was lost and the portal still serves."""

from __future__ import annotations

import os
from pathlib import Path

from sessions.models import FINISHED as ENDED
from sessions.models import AuditEvent, CallStatus, ToolCall


def holder_of(path: Path) -> int:
    """The host pid of the one process holding `path` open (a stdio server reports the pid of its
    own PID namespace, which means nothing outside its sandbox)."""
    wanted = os.stat(path)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            for fd in (entry / "fd").iterdir():
                seen = os.stat(fd)
                if (seen.st_dev, seen.st_ino) == (wanted.st_dev, wanted.st_ino):
                    return int(entry.name)
        except OSError:
            continue
    raise LookupError(f"no process holds {path} open")


def echo_call(user, server, **fields) -> ToolCall:
    """A recorded call of the demo's echo, as the portal's check leaves it (allowed), with `fields`."""
    fields = {"tool": "echo", "arguments": {"message": "m"}, "decision": {"effect": "allow"}, **fields}
    return ToolCall.objects.create(user=user, server=server, server_name=server.name, **fields)


def assert_recorded(call_id: str, *statuses: str) -> ToolCall:
    """The call's record ended with one of `statuses`, a reason if it did not succeed, and its audit row."""
    call = ToolCall.objects.get(pk=call_id)
    assert call.status in statuses, (call.status, call.error_kind, call.error)
    assert call.finished_at is not None
    if call.status not in (CallStatus.SUCCEEDED, CallStatus.TOOL_ERROR):
        assert call.error and call.error_kind, "a call that did not succeed says why"
    audit = AuditEvent.objects.filter(call_id=call.pk, kind="call")
    assert [row.outcome for row in audit] == [call.status], "exactly one audit row for how the call ended"
    return call


def assert_no_call_left_running() -> None:
    left = ToolCall.objects.exclude(status__in=ENDED).exclude(status=CallStatus.AWAITING_APPROVAL)
    assert not left.exists(), list(left.values_list("tool", "status"))
