"""Writing the audit log, and reading it back out as CSV or JSON.

Only actions call `record` (inside their transactions), so a row exists exactly when
the thing it describes was committed. Arguments pass through `redact` first.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from .models import AuditEvent, ToolCall

SECRET_KEY = re.compile(r"password|secret|token|api[_-]?key|authorization", re.IGNORECASE)
REDACTED = "[redacted]"
EXPORT_FIELDS = (
    "at",
    "kind",
    "username",
    "team",
    "server_name",
    "tool",
    "call_id",
    "arguments",
    "decision",
    "rule",
    "reason",
    "duration_ms",
    "outcome",
    "error",
    "via",
    "client",
)


def redact(value: Any) -> Any:
    """The value with every entry whose key looks like a secret replaced, at any depth."""
    if isinstance(value, dict):
        return {
            key: REDACTED if isinstance(key, str) and SECRET_KEY.search(key) else redact(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item) for item in value]
    return value


def describe_rule(rule: dict[str, Any] | None) -> str:
    if not rule:
        return ""
    pinned = ", pinned" if rule.get("pinned") else ""
    return f"{rule['scope']} rule #{rule['id']} {rule['pattern']} ({rule['effect']}{pinned})"


def record(kind: str, user: Any, **fields: Any) -> AuditEvent:
    if "arguments" in fields:
        fields["arguments"] = redact(fields["arguments"])
    return AuditEvent.objects.create(
        kind=kind,
        user=user if getattr(user, "pk", None) else None,
        username=user.get_username() if getattr(user, "pk", None) else "",
        **fields,
    )


def record_for_call(kind: str, call: ToolCall, *, decision: dict[str, Any] | None = None, **fields: Any) -> AuditEvent:
    """A row about one call: who, which server and tool, its arguments, and the decision given."""
    decision = call.decision if decision is None else decision
    server = call.server
    fields.setdefault("decision", decision.get("effect", ""))
    fields.setdefault("rule", describe_rule(decision.get("rule")))
    fields.setdefault("reason", decision.get("reason", ""))
    fields.setdefault("outcome", call.status)
    # Whether a person in the playground or an agent through the MCP endpoint asked, and which
    # client: the client's name is its own claim, kept as given (pages and exports escape it).
    fields.setdefault("via", call.via)
    fields.setdefault("client", call.client)
    return record(
        kind,
        call.user,
        team_id=server.team_id if server else None,
        server_id=call.server_id,
        server_name=call.server_name,
        tool=call.tool,
        call_id=call.id,
        arguments=call.arguments,
        **fields,
    )


# Reasons are written to the person the decision was for ("Approved (once) by you", "Your rule
# mcp__demo allows it", "You cancelled the call."): read by someone else, they name that person.
SECOND_PERSON = (
    (re.compile(r"\bby you\b"), "by {name}"),
    (re.compile(r"\b[Yy]our rule\b"), "{name}'s rule"),
    (re.compile(r"^You cancelled\b"), "{name} cancelled"),
)


def for_reader(text: str, username: str, reader: str) -> str:
    """`text`, written to `username`, as `reader` should read it: naming the person unless it is them."""
    if not text or not username or username == reader:
        return text
    for pattern, replacement in SECOND_PERSON:
        text = pattern.sub(replacement.format(name=username), text)
    return text


def shown_to(event: AuditEvent, reader: str) -> AuditEvent:
    """The row with its reason and error in the words `reader` should read (never saved)."""
    event.reason = for_reader(event.reason, event.username, reader)
    event.error = for_reader(event.error, event.username, reader)
    return event


def as_row(event: AuditEvent, reader: str = "") -> dict[str, Any]:
    """One row for an export; `reader` is who downloads it (a row about someone else names them)."""
    shown_to(event, reader)
    return {
        "at": event.at.isoformat(),
        "kind": event.kind,
        "username": event.username,
        "team": event.team.name if event.team_id and event.team else "",
        "server_name": event.server_name,
        "tool": event.tool,
        "call_id": str(event.call_id) if event.call_id else "",
        "arguments": event.arguments,
        "decision": event.decision,
        "rule": event.rule,
        "reason": event.reason,
        "duration_ms": event.duration_ms,
        "outcome": event.outcome,
        "error": event.error,
        "via": event.via or "",
        "client": event.client,
    }


def csv_lines(events: Iterable[AuditEvent], reader: str = "") -> Iterator[str]:
    """The rows as CSV text, a line at a time, for a streaming response."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=EXPORT_FIELDS)
    writer.writeheader()
    for event in events:
        row = as_row(event, reader)
        row["arguments"] = json.dumps(row["arguments"], sort_keys=True)
        writer.writerow({name: _cell(value) for name, value in row.items()})
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


# What a spreadsheet takes as the start of a formula: = + - @, and a tab or carriage return before one.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    # Tool names and errors come from servers, so a cell a spreadsheet would run is quoted as text.
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value
