"""What happens when people use servers: one row per tool call, kept after the server is gone."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class CallStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    TOOL_ERROR = "tool_error", "Tool error"
    FAILED = "failed", "Failed"
    TIMED_OUT = "timed_out", "Timed out"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"


FINISHED = frozenset(
    {
        CallStatus.SUCCEEDED,
        CallStatus.TOOL_ERROR,
        CallStatus.FAILED,
        CallStatus.TIMED_OUT,
        CallStatus.REJECTED,
        CallStatus.CANCELLED,
    }
)


class ToolCall(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tool_calls")
    server = models.ForeignKey("servers.Server", null=True, on_delete=models.SET_NULL, related_name="tool_calls")
    server_name = models.CharField(max_length=64)
    tool = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=12, choices=CallStatus.choices, default=CallStatus.PENDING)
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    error_kind = models.CharField(max_length=40, blank=True)
    details = models.JSONField(default=dict, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.server_name}/{self.tool} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def as_event(self) -> dict:
        """The call as the browser sees it (docs/websocket-protocol.md, `call.ended`)."""
        return {
            "call": str(self.id),
            "server": self.server_id,
            "tool": self.tool,
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "error_kind": self.error_kind,
            "details": self.details,
            "duration_ms": self.duration_ms,
        }

    def as_record(self) -> dict:
        """Everything the history knows about the call, for its JSON export."""
        return {
            **self.as_event(),
            "server_name": self.server_name,
            "arguments": self.arguments,
            "worker": self.worker,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "exchange": self.exchange(),
        }

    def exchange(self) -> list[dict]:
        """The call's JSON-RPC as the worker exchanged it, with times (ms after it started).

        Rebuilt from the record, not captured from the wire: the request, the progress
        notifications, then the result, or how the portal saw the call end (a timeout, a
        crash: no JSON-RPC answer came). A call rejected before reaching a server has none.
        """
        if self.started_at is None or self.status == CallStatus.REJECTED:
            return []
        request = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": self.tool, "arguments": self.arguments},
        }
        messages = [{"at_ms": 0.0, "direction": "sent", "message": request}]
        for event in (self.details or {}).get("progress", []):
            params = {k: event[k] for k in ("progress", "total", "message") if event.get(k) is not None}
            messages.append(
                {
                    "at_ms": event.get("at_ms"),
                    "direction": "received",
                    "message": {
                        "jsonrpc": "2.0",
                        "method": "notifications/progress",
                        "params": {"progressToken": 1, **params},
                    },
                }
            )
        if self.result is not None:
            answer = {"jsonrpc": "2.0", "id": 1, "result": self.result}
            messages.append({"at_ms": self.duration_ms, "direction": "received", "message": answer})
        elif self.finished:
            ended = {"status": self.status, "error_kind": self.error_kind, "error": self.error}
            messages.append({"at_ms": self.duration_ms, "direction": "portal", "message": ended})
        return messages
