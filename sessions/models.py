"""What happens when people use servers: tool calls, the approvals they wait for, and the audit log.

Call records and audit rows are kept after the server is gone.
"""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from servers.diffs import diff_rows


class CallStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    TOOL_ERROR = "tool_error", "Tool error"
    FAILED = "failed", "Failed"
    TIMED_OUT = "timed_out", "Timed out"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"
    # The portal (or the worker running the call) stopped before the call ended.
    INTERRUPTED = "interrupted", "Interrupted"


FINISHED = frozenset(
    {
        CallStatus.SUCCEEDED,
        CallStatus.TOOL_ERROR,
        CallStatus.FAILED,
        CallStatus.TIMED_OUT,
        CallStatus.REJECTED,
        CallStatus.CANCELLED,
        CallStatus.INTERRUPTED,
    }
)


class Via(models.TextChoices):
    PLAYGROUND = "playground", "Playground"
    MCP = "mcp", "MCP endpoint"
    # A server's app (MCP Apps) in the playground, calling back through the page; `client` is its ui:// URI.
    APP = "app", "MCP App"


class AccessToken(models.Model):
    """A personal access token for the portal's MCP endpoint, for clients that send only a header.

    Shown once when created; only its SHA-256 is kept, so a copy of the database holds no usable
    token. It acts as its owner, within the owner's teams and rules, optionally only on some servers.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="access_tokens")
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    # The token's first characters, so a person can tell their tokens apart on the page.
    prefix = models.CharField(max_length=16)
    # Not limited: every server the owner may use; limited: only `servers`.
    servers = models.ManyToManyField("servers.Server", blank=True, related_name="access_tokens")
    # Kept apart from `servers`: deleting a token's last server empties that set, and an empty set
    # read as "not limited" would widen the token to every server its owner may use.
    limited = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def active(self) -> bool:
        return self.state == "active"

    @property
    def state(self) -> str:
        """ "revoked", "expired" or "active", as the person's page shows it."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= timezone.now():
            return "expired"
        return "active"


# An MCP task's statuses past which it does not move (sessions/mcp/tasks.py).
TASK_ENDED = frozenset({"completed", "failed", "cancelled"})


def task_running(task: dict | None) -> bool:
    """A call's MCP task (`ToolCall.task`) may still run on the server: worth following again, not ending."""
    return bool(task and task.get("id") and task.get("status") not in TASK_ENDED)


class ToolCallManager(models.Manager["ToolCall"]):
    def get_queryset(self) -> models.QuerySet[ToolCall]:
        # The whole output of a truncated call may be megabytes: only its download reads it.
        return super().get_queryset().defer("full_output")


class ToolCall(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tool_calls")
    server = models.ForeignKey("servers.Server", null=True, on_delete=models.SET_NULL, related_name="tool_calls")
    server_name = models.CharField(max_length=64)
    tool = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=CallStatus.choices, default=CallStatus.PENDING)
    # The permission decision that let the call run (or stopped it): effect, reason, rule.
    # The worker refuses a call that has none, so nothing can reach a server unchecked.
    decision = models.JSONField(default=dict, blank=True)
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
    # The page's own name for the intent (`request_id` on `call`): the same one twice from the same
    # person is the same call, whichever process receives it, so the database holds the constraint.
    request_id = models.CharField(max_length=100, null=True, blank=True)
    # How the call came: from the playground, or from an agent through the portal's MCP endpoint
    # (docs/mcp-endpoint.md), with the client's name and version and the token it used.
    via = models.CharField(max_length=20, choices=Via.choices, default=Via.PLAYGROUND)
    client = models.CharField(max_length=200, blank=True)
    access_token = models.ForeignKey(
        "mcp_sessions.AccessToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="tool_calls"
    )
    # The person asked for an MCP task where the tool allows one ("Run as task"; docs/tasks-and-apps.md).
    as_task = models.BooleanField(default=False)
    # The call's MCP task as the worker last saw it (sessions/mcp/tasks.py TaskState), or {} if none:
    # its id lets a worker that did not start the task follow it after a restart.
    task = models.JSONField(default=dict, blank=True)

    objects = ToolCallManager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "-created_at"])]
        constraints = [
            models.UniqueConstraint(
                fields=["user", "request_id"],
                condition=models.Q(request_id__isnull=False),
                name="one_call_per_request_id",
            )
        ]

    def __str__(self) -> str:
        return f"{self.server_name}/{self.tool} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def task_running(self) -> bool:
        return task_running(self.task)

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
            # The raw JSON-RPC stays on the record (the call's page, its export), out of the live event.
            "details": {k: v for k, v in (self.details or {}).items() if k != "exchange"},
            "duration_ms": self.duration_ms,
            "decision": self.decision,
            "task": self.task or None,
        }

    def as_record(self) -> dict:
        """Everything the history knows about the call, for its JSON export."""
        return {
            **self.as_event(),
            "server_name": self.server_name,
            "arguments": self.arguments,
            "via": self.via,
            "client": self.client,
            # The personal access token's name, never the token (an OAuth sign-in has none).
            "access_token": self.access_token.name if self.access_token_id else None,
            "worker": self.worker,
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "started_at": self.started_at.isoformat() if self.started_at else None,
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
            "exchange": self.exchange(),
        }

    def exchange(self) -> list[dict]:
        """The call's JSON-RPC as it passed on the connection, with times (ms after it started).

        Captured by the worker (sessions/mcp/wire.py): requests, answers, the server's requests
        (elicitation, sampling) and notifications; the answer's result is the recorded one. When
        no answer came (a timeout, a crash) a last entry says how the portal saw the call end.
        Records from before the capture are rebuilt from what they kept. A call rejected before
        reaching a server has none.
        """
        if self.started_at is None or self.status == CallStatus.REJECTED:
            return []
        captured = (self.details or {}).get("exchange")
        if captured is not None:
            return self._captured(captured)
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

    def _captured(self, captured: list[dict]) -> list[dict]:
        messages = []
        answered = False
        for entry in captured:
            message = entry.get("message") or {}
            if message.get("result") == {"$ref": "result"}:
                message, answered = {**message, "result": self.result}, True
            messages.append({**entry, "message": message})
        if not answered and self.finished:
            ended = {"status": self.status, "error_kind": self.error_kind, "error": self.error}
            messages.append({"at_ms": self.duration_ms, "direction": "portal", "message": ended})
        return messages


class ApprovalState(models.TextChoices):
    PENDING = "pending", "Waiting for an answer"
    APPROVED = "approved", "Approved"
    DECLINED = "declined", "Declined"
    EXPIRED = "expired", "Timed out"
    INTERRUPTED = "interrupted", "Interrupted"


class Approval(models.Model):
    """One question to a person: may this call run? Its id is the only handle the browser gets."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    call = models.ForeignKey(ToolCall, on_delete=models.CASCADE, related_name="approvals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="approvals")
    # The tool as it will be called, and what changed since an earlier approval.
    definition = models.JSONField(default=dict)
    fingerprint = models.CharField(max_length=64)
    diff = models.TextField(blank=True)
    decision = models.JSONField(default=dict)
    state = models.CharField(max_length=12, choices=ApprovalState.choices, default=ApprovalState.PENDING)
    remember = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["user", "state"])]

    def __str__(self) -> str:
        return f"approval of {self.call} ({self.state})"

    @property
    def can_remember(self) -> bool:
        return bool(self.decision.get("can_remember"))

    def as_event(self) -> dict[str, Any]:
        """What the playground's approval dialog and the approvals inbox show (`approval.requested`)."""
        call = self.call
        left = (self.expires_at - timezone.now()).total_seconds()
        return {
            "type": "approval.requested",
            "approval": str(self.id),
            "call": str(call.id),
            "server": call.server_id,
            "server_name": call.server_name,
            "tool": call.tool,
            # Who asked: the playground, or an agent's MCP client (its name and version).
            "via": call.via,
            "client": call.client,
            "title": self.definition.get("title") or (self.definition.get("annotations") or {}).get("title") or "",
            "description": self.definition.get("description") or "",
            "annotations": self.definition.get("annotations") or {},
            "arguments": call.arguments,
            "reason": self.decision.get("reason", ""),
            "rule": self.decision.get("rule"),
            "diff": self.diff,
            "diff_rows": diff_rows(self.diff),
            "can_remember": self.can_remember,
            "expires_at": self.expires_at.isoformat(),
            "expires_in": max(0.0, round(left, 1)),
        }


class AuditQuerySet(models.QuerySet["AuditEvent"]):
    # The application never edits or deletes audit rows; these paths fail loudly instead.
    def update(self, **kwargs: Any) -> int:
        raise PermissionError("The audit log is append-only.")

    def delete(self) -> Any:
        raise PermissionError("The audit log is append-only.")


class AuditKind(models.TextChoices):
    DECISION = "decision", "Decision"
    APPROVAL = "approval", "Approval"
    CALL = "call", "Call"
    POLICY = "policy", "Policy change"
    HOOK = "hook", "Automatic answer"
    MEMBERSHIP = "membership", "Membership change"


class AuditEvent(models.Model):
    """One line of the audit log: who did what with which tool, what was decided and why, how it ended.

    Written only by actions (sessions/audit.py), with secrets in arguments redacted.
    Names are copied, so a row still reads right after the user, server or team is gone.
    """

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=10, choices=AuditKind.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    username = models.CharField(max_length=150)
    team = models.ForeignKey("servers.Team", null=True, on_delete=models.SET_NULL, related_name="+")
    server_id = models.BigIntegerField(null=True)
    server_name = models.CharField(max_length=64, blank=True)
    tool = models.CharField(max_length=210, blank=True)
    call_id = models.UUIDField(null=True)
    arguments = models.JSONField(default=dict, blank=True)
    decision = models.CharField(max_length=20, blank=True)
    rule = models.CharField(max_length=250, blank=True)
    reason = models.TextField(blank=True)
    duration_ms = models.FloatField(null=True)
    outcome = models.CharField(max_length=20, blank=True)
    error = models.TextField(blank=True)
    # How the call the row is about came (Via) and, from an agent, its client's name and version as
    # the client gave it. None on rows about no call, and on rows written before it was kept.
    via = models.CharField(max_length=20, choices=Via.choices, null=True, blank=True)
    client = models.CharField(max_length=200, blank=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["team", "-at"]), models.Index(fields=["user", "-at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.username} {self.kind} {self.tool} {self.decision} {self.outcome}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise PermissionError("The audit log is append-only.")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise PermissionError("The audit log is append-only.")


class ElicitationState(models.TextChoices):
    PENDING = "pending", "Waiting for an answer"
    ACCEPTED = "accept", "Accepted"
    DECLINED = "decline", "Declined"
    CANCELLED = "cancel", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"
    INTERRUPTED = "interrupted", "Interrupted"


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
    # The team admin's automatic answer that answered it, when no person was asked.
    hook = models.ForeignKey("servers.ElicitationHook", null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    answered_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.call_id}: {self.state}"


class SamplingState(models.TextChoices):
    PENDING = "pending", "Waiting for a reply"
    APPROVED = "approve", "Approved"
    DECLINED = "decline", "Declined"
    CANCELLED = "cancel", "Cancelled"
    TIMED_OUT = "timed_out", "Timed out"
    INTERRUPTED = "interrupted", "Interrupted"


class SamplingRequest(models.Model):
    """A server asking, with sampling/createMessage, for a model's reply; a person writes it instead."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    call = models.ForeignKey(ToolCall, on_delete=models.CASCADE, related_name="sampling_requests")
    request_id = models.CharField(max_length=200, blank=True)
    params = models.JSONField(default=dict)  # messages, systemPrompt, maxTokens… as the server sent them
    state = models.CharField(max_length=12, choices=SamplingState.choices, default=SamplingState.PENDING)
    reply = models.TextField(blank=True)
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
