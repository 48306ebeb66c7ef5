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
    # The channel-layer channel the worker running the call listens on (cancel, elicitation answers).
    channel = models.CharField(max_length=200, blank=True)
    # The whole output when `result` was truncated, size-capped (MCP_FULL_OUTPUT_MAX_BYTES).
    full_output = models.BinaryField(null=True, blank=True, editable=False)
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


class ElicitationState(models.TextChoices):
    PENDING = "pending", "Waiting for an answer"
    ACCEPTED = "accept", "Accepted"
    DECLINED = "decline", "Declined"
    CANCELLED = "cancel", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"


class Elicitation(models.Model):
    """A server asking the person behind a call for information, and what they answered."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    call = models.ForeignKey(ToolCall, on_delete=models.CASCADE, related_name="elicitations")
    request_id = models.CharField(max_length=200, blank=True)
    mode = models.CharField(max_length=8, default="form")
    message = models.TextField()
    schema = models.JSONField(default=dict)
    state = models.CharField(max_length=12, choices=ElicitationState.choices, default=ElicitationState.PENDING)
    response = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.call_id}: {self.state}"


class ConnectionState(models.TextChoices):
    CONNECTED = "connected", "Connected"
    PENDING = "pending", "Connecting"
    NEEDS_AUTH = "needs-auth", "Needs authorization"
    FAILED = "failed", "Failed"
    DISABLED = "disabled", "Disabled"


class ConnectionStatus(models.Model):
    """The live state of one (server, owner) connection, as the worker holding it last saw it.

    `owner` is the pool key's credential owner ("user:<id>", or "team:<id>" for a shared server).
    A closed connection has no row: the page then shows it as not connected.
    """

    server = models.ForeignKey("servers.Server", on_delete=models.CASCADE, related_name="connection_statuses")
    owner = models.CharField(max_length=40)
    status = models.CharField(max_length=12, choices=ConnectionState.choices)
    error_kind = models.CharField(max_length=40, blank=True)
    error = models.TextField(blank=True)
    worker = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "owner"], name="one_status_per_connection")]

    def __str__(self) -> str:
        return f"{self.server_id}/{self.owner}: {self.status}"

    def as_event(self) -> dict:
        return {
            "type": "connection.status",
            "server": self.server_id,
            "status": self.status,
            "error_kind": self.error_kind,
            "error": self.error,
        }
