"""Writes that matter for live use: starting tool calls, asking people, and finishing calls.

Every call and every permission decision leaves an audit row (sessions/audit.py),
written in the same transaction as the change it describes.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from servers.models import Effect, PermissionRule, Server, ServerUnusable, check_usable, usable_server
from servers.permissions import decide_for, usable_servers
from servers.policy import ASK, DENY, Decision, definition_diff
from sessions.mcp.elicitation import validate_answer
from sessions.mcp.naming import tool_full_name
from sessions.mcp.schema import validate_arguments

from . import affinity, audit, events, queue
from .mcp.failure import Failure
from .models import (
    Approval,
    ApprovalState,
    AuditKind,
    CallStatus,
    ConnectionStatus,
    Elicitation,
    ElicitationState,
    SamplingRequest,
    SamplingState,
    ToolCall,
    Via,
)

ANSWERS = ("allow_once", "always_allow", "deny")


class ApprovalError(Exception):
    """An answer the portal will not take; the text goes back to the browser."""


class AnswerError(Exception):
    """A Cancel, or an answer to a form or a sampling request, the portal will not act on; the text goes
    back to the browser, with `errors` where an answer breaks the form's schema."""

    def __init__(self, message: str, errors: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.errors = errors or []


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Came:
    """How a call came to the portal, recorded on it: `via` the playground or the MCP endpoint, from
    which client (its name and version), with which personal access token (if one)."""

    via: str = Via.PLAYGROUND
    client: str = ""
    access_token: Any = None

    def fields(self) -> dict[str, Any]:
        return {"via": self.via, "client": self.client[:200], "access_token": self.access_token}


PLAYGROUND = Came()


def _enqueue_on_commit(call_id: str) -> None:
    transaction.on_commit(lambda: queue.start_call(call_id))


# -- starting a call ---------------------------------------------------------------------


def do_start_tool_call(
    user: Any,
    server: Any,
    tool: str,
    arguments: dict[str, Any],
    request_id: str | None = None,
    came: Came | None = None,
    as_task: bool = False,
) -> ToolCall:
    """Record the call, decide on it from the server's last tool list, and act on the decision.

    allow → a worker gets it; deny → it ends rejected, with the rule; ask → it waits
    for the user's answer. A tool missing from the last list is decided by the worker,
    on the live definition. A call that cannot start (a server the user cannot see, or
    a disabled one) is still recorded, as rejected, so every attempt leaves a trace.

    `server` is the id the person asked for (checked here), or a row the caller has just found among
    the person's usable servers (`Server.objects.usable_by(user)`, with `team__policy`) in the same
    trip to the database: the endpoint finds a tool's server by name, and one query is enough.

    `came` says how the call came (the playground by default; an agent through the MCP endpoint).
    `as_task` asks for an MCP task where the tool allows one (the worker asks the server).

    A `request_id` this person already used names the call it started: that call comes back,
    and nothing new is recorded or run. The database's unique constraint decides, on the insert
    the call makes anyway, so two processes receiving the same intent at once still make one call.
    """
    try:
        return _start_tool_call(user, server, tool, arguments, request_id, came or PLAYGROUND, as_task)
    except IntegrityError:
        first = ToolCall.objects.filter(user=user, request_id=request_id).first() if request_id else None
        if first is None:
            raise
        return first


def _start_tool_call(
    user: Any, asked: Any, tool: str, arguments: dict[str, Any], request_id: str | None, came: Came, as_task: bool
) -> ToolCall:
    try:
        if isinstance(asked, Server):
            server = check_usable(asked)
        else:
            # The person's usable servers as this process last read them, if nothing changed since
            # (servers/decisions.py); a server not among them gets usable_server's refusal, in its words.
            found = next((s for s in usable_servers(user) if type(asked) is int and s.pk == asked), None)
            server = found or usable_server(asked, user, Server.objects.select_related("team__policy"))
    except ServerUnusable as exc:
        # A disabled server's call names it; one the user cannot see names nothing of it.
        seen = exc.server
        name = seen.name if seen else ""
        call = ToolCall(
            user=user,
            server=seen,
            server_name=name,
            tool=tool,
            arguments=arguments,
            request_id=request_id,
            **came.fields(),
        )
        return _reject(call, exc.message, exc.kind)
    call = ToolCall(
        user=user,
        server=server,
        server_name=server.name,
        tool=tool,
        arguments=arguments,
        request_id=request_id,
        as_task=as_task,
        **came.fields(),
    )
    definition = server.tool(tool)
    decision = decide_for(server, user.pk, tool, definition)
    call.decision = decision.as_dict()
    if decision.effect == DENY:
        _reject(call, decision.reason, "denied", decided=True)
        return call
    asks_now = decision.effect == ASK and definition is not None
    if asks_now and validate_arguments(definition.get("inputSchema"), arguments):
        # Nobody should approve a call that cannot run: the worker rejects it on the live schema.
        asks_now = False
    if asks_now:
        call.status = CallStatus.AWAITING_APPROVAL
        with transaction.atomic():
            call.save()
            _request_approval(call, decision, definition)
        return call
    if decision.effect == ASK:
        call.decision = {**call.decision, "effect": "defer", "reason": "The worker decides on the live definition."}
    # To the worker that holds this user's session with the server, if one does (sessions/affinity.py);
    # the call records it, so the sweep can send the call elsewhere if that worker dies first.
    call.worker = affinity.route(server, user.pk)
    # One write, so no transaction of its own (on PostgreSQL that is two round trips fewer per call);
    # inside a caller's transaction, a savepoint, so a duplicate request id leaves it usable.
    if transaction.get_connection().in_atomic_block:
        with transaction.atomic():
            call.save()
    else:
        call.save()
    transaction.on_commit(lambda: queue.start_call(str(call.id), call.worker))
    return call


@transaction.atomic
def _reject(call: ToolCall, error: str, kind: str, decided: bool = False) -> ToolCall:
    call.status, call.error, call.error_kind, call.finished_at = CallStatus.REJECTED, error, kind, timezone.now()
    call.save()
    if decided:
        audit.record_for_call(AuditKind.DECISION, call)
    audit.record_for_call(AuditKind.CALL, call, error=error)
    return call


# -- the worker's check ------------------------------------------------------------------


@dataclass
class Gate:
    """The worker's verdict on a claimed call: run it, end it, or leave it waiting for an answer."""

    decision: dict[str, Any]
    run: bool = False
    waiting: bool = False
    kind: str = ""
    reason: str = ""


def do_check_tool_call(call: ToolCall, definition: dict[str, Any]) -> Gate:
    """Decide again, in the worker, on the live definition and the rules as they are now.

    A call runs only if this decision allows it, or asks and the user approved this
    very definition for this call.
    """
    server = call.server
    assert server is not None
    decision = decide_for(server, call.user_id, call.tool, definition)
    if decision.effect == DENY:
        audit.record_for_call(AuditKind.DECISION, call, decision=decision.as_dict(), outcome=CallStatus.REJECTED)
        return Gate(decision.as_dict(), kind="denied", reason=decision.reason)
    if decision.effect != ASK:
        return Gate(decision.as_dict(), run=True)
    approvals = list(call.approvals.filter(state=ApprovalState.APPROVED))
    approved = next((a for a in approvals if a.fingerprint == decision.fingerprint), None)
    if approved is not None:
        allowed = {**decision.as_dict(), "effect": "allow", "approval": str(approved.id)}
        return Gate({**allowed, "reason": approved_reason(approved)}, run=True)
    # Asked, and not approved for this definition (the tool changed since, or the last
    # list the portal had was out of date): ask the person now, showing what changed.
    with transaction.atomic():
        moved = ToolCall.objects.filter(pk=call.pk, status=CallStatus.RUNNING).update(
            status=CallStatus.AWAITING_APPROVAL, decision=decision.as_dict()
        )
        if not moved:
            return Gate(decision.as_dict(), kind="cancelled", reason="The call ended while it was being checked.")
        call.status, call.decision = CallStatus.AWAITING_APPROVAL, decision.as_dict()
        previous = approvals[-1].definition if approvals else None
        _request_approval(call, decision, definition, previous)
    return Gate(decision.as_dict(), waiting=True)


def approved_reason(approval: Approval) -> str:
    how = "always" if approval.remember else "once"
    return f"Approved ({how}) by you at {approval.answered_at:%H:%M:%S}: {approval.decision.get('reason', '')}"


# -- approvals ----------------------------------------------------------------------------


def _request_approval(
    call: ToolCall, decision: Decision, definition: dict[str, Any], previous: dict[str, Any] | None = None
) -> Approval:
    if previous is None and decision.stale:
        previous = next((rule.definition for rule in decision.stale if rule.definition), None)
    timeout = settings.PORTAL_APPROVAL_TIMEOUT
    approval = Approval.objects.create(
        call=call,
        user=call.user,
        definition=definition,
        fingerprint=decision.fingerprint,
        diff=definition_diff(previous, definition),
        decision=decision.as_dict(),
        expires_at=timezone.now() + timedelta(seconds=timeout),
    )
    audit.record_for_call(AuditKind.DECISION, call, decision=decision.as_dict())
    events.publish_on_commit(call.user_id, approval.as_event())

    approval_id = str(approval.id)
    transaction.on_commit(lambda: queue.send("sessions.expire_approval", (approval_id,), countdown=timeout))
    return approval


def _pending_approval(user: Any, approval_id: Any) -> Approval:
    try:
        key = uuid.UUID(str(approval_id))
    except ValueError:
        raise ApprovalError("Unknown approval.") from None
    # Another user's approval reads exactly like one that does not exist.
    approval = (
        Approval.objects.select_for_update(of=("self",))
        .select_related("call__server", "call__user")
        .filter(pk=key, user=user)
        .first()
    )
    if approval is None:
        raise ApprovalError("Unknown approval.")
    if approval.state != ApprovalState.PENDING:
        raise ApprovalError(f"This approval was already answered ({approval.get_state_display().lower()}).")
    return approval


def do_answer_approval(user: Any, approval_id: Any, answer: str) -> Approval:
    """Allow once, always allow (a user rule pinned to this definition), or deny a waiting call."""
    if answer not in ANSWERS:
        raise ApprovalError(f"'answer' must be one of {', '.join(ANSWERS)}.")
    with transaction.atomic():
        approval = _pending_approval(user, approval_id)
        if approval.expires_at <= timezone.now():
            # Committed before the error goes back: the call ends as timed out either way.
            _expire(approval)
        else:
            _answer(approval, answer)
            return approval
    raise ApprovalError("This approval timed out; call the tool again.")


def _answer(approval: Approval, answer: str) -> None:
    if answer == "always_allow" and not approval.can_remember:
        raise ApprovalError("A rule asks for this tool every time, so it cannot be always allowed.")
    call = approval.call
    approval.answered_at = timezone.now()
    approval.state = ApprovalState.DECLINED if answer == "deny" else ApprovalState.APPROVED
    approval.remember = answer == "always_allow"
    approval.save(update_fields=["state", "answered_at", "remember"])
    answered = {"allow_once": "approved", "always_allow": "approved_always", "deny": "declined"}[answer]
    audit.record_for_call(
        AuditKind.APPROVAL,
        call,
        decision={**approval.decision, "effect": answered},
        outcome=CallStatus.REJECTED if answer == "deny" else CallStatus.PENDING,
    )
    if answer == "always_allow":
        _remember(approval)
    if answer == "deny":
        _end_waiting_call(call, CallStatus.REJECTED, "You declined the call.", "declined")
    else:
        allowed = {
            **approval.decision,
            "effect": "allow",
            "approval": str(approval.id),
            "reason": approved_reason(approval),
        }
        if ToolCall.objects.filter(pk=call.pk, status=CallStatus.AWAITING_APPROVAL).update(
            status=CallStatus.PENDING, decision=allowed
        ):
            _enqueue_on_commit(str(call.id))
    events.publish_on_commit(call.user_id, _ended_event(approval))


def _remember(approval: Approval) -> None:
    """The "Always allow" rule: the user's, for this tool of this server, pinned to this definition."""
    call = approval.call
    server = call.server
    if server is None:
        return
    rule, _ = PermissionRule.objects.update_or_create(
        team_id=server.team_id,
        user=approval.user,
        pattern=tool_full_name(server.name, call.tool),
        effect=Effect.ALLOW,
        defaults={"fingerprint": approval.fingerprint, "definition": approval.definition, "created_by": approval.user},
    )
    audit.record(
        AuditKind.POLICY,
        approval.user,
        team_id=server.team_id,
        server_id=server.pk,
        server_name=server.name,
        tool=rule.pattern,
        decision="allow",
        rule=audit.describe_rule(rule.as_rule().as_dict()),
        reason="Always allow, pinned to the approved definition.",
        outcome="rule_saved",
    )


def _ended_event(approval: Approval) -> dict[str, Any]:
    return {
        "type": "approval.ended",
        "approval": str(approval.id),
        "call": str(approval.call_id),
        "state": approval.state,
    }


def _end_waiting_call(call: ToolCall, status: str, error: str, kind: str) -> None:
    ended = ToolCall.objects.filter(pk=call.pk, status=CallStatus.AWAITING_APPROVAL).update(
        status=status, error=error, error_kind=kind, finished_at=timezone.now()
    )
    if ended:
        call.refresh_from_db()
        audit.record_for_call(AuditKind.CALL, call, error=error)
        events.publish_on_commit(call.user_id, {"type": "call.ended", **call.as_event()})


def _expire(approval: Approval) -> None:
    Approval.objects.filter(pk=approval.pk, state=ApprovalState.PENDING).update(state=ApprovalState.EXPIRED)
    approval.state = ApprovalState.EXPIRED
    call = approval.call
    # The timeout the approval was given, which may differ from this process's setting.
    timeout = round((approval.expires_at - approval.created_at).total_seconds())
    audit.record_for_call(
        AuditKind.APPROVAL, call, decision={**approval.decision, "effect": "expired"}, outcome=CallStatus.TIMED_OUT
    )
    _end_waiting_call(
        call, CallStatus.TIMED_OUT, f"Nobody answered the approval within {timeout:g} s.", "approval_timeout"
    )
    events.publish_on_commit(call.user_id, _ended_event(approval))


@transaction.atomic
def do_expire_approval(approval_id: str) -> float | None:
    """End an approval nobody answered in time. Returns the seconds left if it is not due yet."""
    approval = (
        Approval.objects.select_for_update(of=("self",))
        .select_related("call__server", "call__user")
        .filter(pk=approval_id, state=ApprovalState.PENDING)
        .first()
    )
    if approval is None:
        return None
    left = (approval.expires_at - timezone.now()).total_seconds()
    if left > 0:
        return left
    _expire(approval)
    return None


def do_withdraw_member_requests(user_id: int, server_ids: list[int], reason: str) -> None:
    """Someone left a team (or may no longer call its servers): their calls to those servers that wait
    for an approval end rejected, and the forms and sampling requests their running calls hold open
    are cancelled, the server hearing "cancel" (as when the person cancels the form)."""
    approvals = (
        Approval.objects.select_for_update(of=("self",))
        .select_related("call__server", "call__user")
        .filter(user_id=user_id, state=ApprovalState.PENDING, call__server_id__in=server_ids)
    )
    for approval in approvals:
        Approval.objects.filter(pk=approval.pk, state=ApprovalState.PENDING).update(
            state=ApprovalState.DECLINED, answered_at=timezone.now()
        )
        approval.state = ApprovalState.DECLINED
        _end_waiting_call(approval.call, CallStatus.REJECTED, reason, "membership_ended")
        events.publish_on_commit(user_id, _ended_event(approval))
    forms = Elicitation.objects.select_related("call").filter(
        state=ElicitationState.PENDING, call__user_id=user_id, call__server_id__in=server_ids
    )
    for form in forms:
        if do_answer_elicitation(form.pk, ElicitationState.CANCELLED) and form.call.channel:
            message = {"type": "elicitation.answer", "elicitation": str(form.pk), "action": "cancel", "content": None}
            transaction.on_commit(lambda c=form.call.channel, m=message: send_to_call(c, m))
    asks = SamplingRequest.objects.select_related("call").filter(
        state=SamplingState.PENDING, call__user_id=user_id, call__server_id__in=server_ids
    )
    for ask in asks:
        if do_answer_sampling(ask.pk, SamplingState.DECLINED) and ask.call.channel:
            message = {"type": "sampling.answer", "sampling": str(ask.pk), "action": "decline", "text": "", "model": ""}
            transaction.on_commit(lambda c=ask.call.channel, m=message: send_to_call(c, m))


@transaction.atomic
def do_withdraw_waiting_call(user: Any, call_id: str, reason: str) -> bool:
    """The caller gave up on a call that waits for an approval (an agent's client cancelled it):
    the call ends cancelled and its approval closes, so nobody is asked about it any more."""
    approvals = (
        Approval.objects.select_for_update(of=("self",))
        .select_related("call__server", "call__user")
        .filter(call_id=call_id, user=user, state=ApprovalState.PENDING)
    )
    withdrawn = False
    for approval in approvals:
        Approval.objects.filter(pk=approval.pk, state=ApprovalState.PENDING).update(
            state=ApprovalState.DECLINED, answered_at=timezone.now()
        )
        approval.state = ApprovalState.DECLINED
        _end_waiting_call(approval.call, CallStatus.CANCELLED, reason, "cancelled")
        events.publish_on_commit(user.pk, _ended_event(approval))
        withdrawn = True
    return withdrawn


def send_to_call(channel: str, message: dict[str, Any]) -> None:
    async_to_sync(get_channel_layer().send)(channel, message)


def do_running_call_channel(user: Any, call_id: str) -> str:
    """Where the worker running the person's call listens for a Cancel."""
    # Someone else's call and an unknown one get the same answer: ids are not for probing.
    call = ToolCall.objects.filter(pk=call_id, user=user).first() if _is_uuid(call_id) else None
    if call is None:
        raise AnswerError("Unknown call.")
    if call.status != CallStatus.RUNNING:
        raise AnswerError(f"The call is {call.status}, not running: there is nothing to cancel.")
    if not call.channel:
        raise AnswerError("The call is starting; try again in a moment.")
    return call.channel


def do_take_elicitation_answer(user: Any, elicitation_id: str, action: str, content: Any) -> tuple[str, str]:
    """Check the person's answer against the schema that was asked for, record it once, and say where
    it goes: the call's channel and the call's id."""
    found = Elicitation.objects.select_related("call").filter(pk=elicitation_id) if _is_uuid(elicitation_id) else None
    elicitation = found.first() if found is not None else None
    if elicitation is None or elicitation.call.user_id != user.pk:
        raise AnswerError("Unknown elicitation.")
    if elicitation.state != ElicitationState.PENDING:
        raise AnswerError(f"This form was already closed ({elicitation.get_state_display().lower()}).")
    if action == "accept" and elicitation.mode == "url":
        content = None  # consent to open the page: the server gets no content
    elif action == "accept":
        errors = validate_answer(elicitation.schema, content)
        if errors:
            raise AnswerError("The answer does not match the form; nothing was sent.", errors)
    if not do_answer_elicitation(elicitation.pk, action, content):
        raise AnswerError("This form was already closed.")
    return elicitation.call.channel, str(elicitation.call_id)


def do_take_sampling_answer(user: Any, sampling_id: str, action: str, text: str) -> tuple[str, str]:
    """Record the person's answer to a sampling request once, and say where it goes, as for forms."""
    found = SamplingRequest.objects.select_related("call").filter(pk=sampling_id) if _is_uuid(sampling_id) else None
    request = found.first() if found is not None else None
    if request is None or request.call.user_id != user.pk:
        raise AnswerError("Unknown sampling request.")
    if request.state != SamplingState.PENDING or not do_answer_sampling(request.pk, action, text):
        raise AnswerError("This sampling request was already answered or closed.")
    return request.call.channel, str(request.call_id)


def do_pending_approval_events(user: Any) -> list[dict[str, Any]]:
    """The user's approvals still waiting, as the playground shows them."""
    return [approval.as_event() for approval in do_list_pending_approvals(user)]


@transaction.atomic
def do_list_pending_approvals(user: Any) -> list[Approval]:
    """The user's approvals still waiting, after ending any that are overdue (a lost expiry task)."""
    pending = list(
        Approval.objects.select_for_update(of=("self",))
        .select_related("call__server", "call__user")
        .filter(user=user, state=ApprovalState.PENDING)
    )
    now = timezone.now()
    for approval in pending:
        if approval.expires_at <= now:
            _expire(approval)
    return [approval for approval in pending if approval.state == ApprovalState.PENDING]


# -- running and finishing --------------------------------------------------------------


def do_claim_tool_call(call_id: str, worker: str, channel: str = "") -> bool:
    """Pending → running, once: a task delivered twice must not call the tool twice.

    `channel` is where the worker will listen for Cancel and answers, recorded in the same write
    (the consumer sends those to the call's channel).
    """
    claimed = ToolCall.objects.filter(pk=call_id, status=CallStatus.PENDING).update(
        status=CallStatus.RUNNING, started_at=timezone.now(), worker=worker, channel=channel
    )
    return claimed == 1


def do_record_task(call_id: str, task: dict[str, Any]) -> None:
    """The call's MCP task as the worker now sees it: on the record, for a reload, the Tasks page,
    and the worker that resumes it if this one stops (`do_hand_back_task_call`)."""
    ToolCall.objects.filter(pk=call_id).update(task=task)


def do_hand_back_task_call(call_id: Any, worker: str) -> bool:
    """A running call whose task the server still runs, left by `worker` (stopping, or dead): back to
    pending and unrouted, so the next worker to claim it follows the same task instead of calling
    the tool again (sessions/worker/tool_call.py). Compare-and-set on (running, that worker)."""
    handed = ToolCall.objects.filter(pk=call_id, status=CallStatus.RUNNING, worker=worker).update(
        status=CallStatus.PENDING, worker="", channel=""
    )
    if handed:
        # To Celery's shared queue (a lane would be this worker's); if that copy is lost with a
        # stopping process, the sweep sends the pending call again.
        transaction.on_commit(lambda: queue.start_call(str(call_id)))
    return handed == 1


@transaction.atomic
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
    decision: dict[str, Any] | None = None,
    call: ToolCall | None = None,
    worker: str | None = None,
) -> ToolCall:
    """Record how the call ended, and audit it. A caller that holds the row passes it as `call`:
    it is updated in memory instead of read back (one query less per call)."""
    fields: dict[str, Any] = {
        "status": status,
        "result": result,
        "full_output": full_output,
        "error": error,
        "error_kind": error_kind,
        "details": details or {},
        "duration_ms": duration_ms,
        "finished_at": timezone.now(),
    }
    if decision is not None:
        fields["decision"] = decision
    if worker:
        fields["worker"] = worker
    ToolCall.objects.filter(pk=call_id).update(**fields)
    if call is None:
        call = ToolCall.objects.select_related("server", "user").get(pk=call_id)
    else:
        for name, value in fields.items():
            setattr(call, name, value)
    audit.record_for_call(AuditKind.CALL, call, duration_ms=duration_ms, error=error)
    return call


def do_unroute_calls(worker: str) -> list[Any]:
    """Calls routed to `worker` that it never claimed (it died): no longer routed; returns their ids, to send again."""
    with transaction.atomic():
        waiting = ToolCall.objects.select_for_update().filter(status=CallStatus.PENDING, worker=worker)
        ids = list(waiting.values_list("pk", flat=True))
        ToolCall.objects.filter(pk__in=ids, status=CallStatus.PENDING).update(worker="")
    return ids


def do_end_orphaned_call(call_id: Any, worker: str) -> ToolCall | None:
    """End a call left running by a worker that stopped (killed, crashed, lost its machine).

    Compare-and-set on (running, that worker): if the worker finished it after all, or another
    sweep got there first, nothing happens. The tool may or may not have run: the record says so.
    """
    with transaction.atomic():
        reason = (
            f"The worker running this call stopped ({worker}) before it ended; "
            "the server may or may not have carried it out."
        )
        ended = ToolCall.objects.filter(pk=call_id, status=CallStatus.RUNNING, worker=worker).update(
            status=CallStatus.FAILED, error=reason, error_kind="worker_lost", finished_at=timezone.now()
        )
        if not ended:
            return None
        call = ToolCall.objects.select_related("server", "user").get(pk=call_id)
        audit.record_for_call(AuditKind.CALL, call, error=reason)
        events.publish_on_commit(call.user_id, {"type": "call.ended", **call.as_event()})
    return call


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


@transaction.atomic
def do_request_elicitation(
    call_id: str, request_id: str, message: str, schema: dict[str, Any], mode: str = "form"
) -> Elicitation:
    """A form (`schema` is the requested schema) or, in URL mode, a page to visit (`schema` holds its url)."""
    return Elicitation.objects.create(call_id=call_id, request_id=request_id, message=message, schema=schema, mode=mode)


@transaction.atomic
def do_apply_elicitation_hook(
    call_id: str, request_id: str, message: str, schema: dict[str, Any]
) -> tuple[Elicitation, dict[str, Any]] | None:
    """Answer a form with the first of its server's automatic answers that matches and fits, recorded
    and audited; None when none does (then a person is asked)."""
    call = ToolCall.objects.select_related("server", "user").get(pk=call_id)
    if call.server is None:
        return None
    for hook in call.server.elicitation_hooks.all():
        if not hook.matches(message, schema):
            continue
        content = dict(hook.content) if hook.action == "accept" else None
        if content is not None and validate_answer(schema, content):
            continue  # it does not fit this form: better to ask than to send a wrong answer
        row = Elicitation.objects.create(
            call=call,
            request_id=request_id,
            message=message,
            schema=schema,
            state=hook.action,
            response=content,
            hook=hook,
            answered_at=timezone.now(),
        )
        reason = f"Automatic answer #{hook.pk} ({hook.get_action_display().lower()}) to: {message}"
        audit.record_for_call(AuditKind.HOOK, call, outcome=hook.action, reason=reason[:2000])
        return row, {"action": hook.action, "content": content}
    return None


def do_answer_elicitation(elicitation_id: Any, state: str, response: dict[str, Any] | None = None) -> bool:
    """Pending → answered, once: a second answer (or one after the timeout) changes nothing."""
    answered = Elicitation.objects.filter(pk=elicitation_id, state=ElicitationState.PENDING).update(
        state=state, response=response, answered_at=timezone.now()
    )
    return answered == 1


@transaction.atomic
def do_request_sampling(call_id: str, request_id: str, params: dict[str, Any]) -> SamplingRequest:
    return SamplingRequest.objects.create(call_id=call_id, request_id=request_id, params=params)


def do_answer_sampling(sampling_id: Any, state: str, reply: str = "") -> bool:
    """Pending → answered, once, as for elicitations."""
    answered = SamplingRequest.objects.filter(pk=sampling_id, state=SamplingState.PENDING).update(
        state=state, reply=reply, answered_at=timezone.now()
    )
    return answered == 1


@transaction.atomic
def do_close_elicitations(call_id: str, state: str = ElicitationState.CANCELLED) -> list[tuple[str, str]]:
    """The call ended with forms or sampling requests still open: they are closed as cancelled (or
    `state`: "interrupted" when the portal stopped). Returns (kind, id) for each, kind "elicitation"
    or "sampling"."""
    now = timezone.now()
    forms = Elicitation.objects.select_for_update().filter(call_id=call_id, state=ElicitationState.PENDING)
    form_ids = [str(pk) for pk in forms.values_list("pk", flat=True)]
    Elicitation.objects.filter(pk__in=form_ids).update(state=ElicitationState(state), answered_at=now)
    asks = SamplingRequest.objects.select_for_update().filter(call_id=call_id, state=SamplingState.PENDING)
    ask_ids = [str(pk) for pk in asks.values_list("pk", flat=True)]
    SamplingRequest.objects.filter(pk__in=ask_ids).update(state=SamplingState(state), answered_at=now)
    return [("elicitation", i) for i in form_ids] + [("sampling", i) for i in ask_ids]


# -- stopping ---------------------------------------------------------------------------

INTERRUPTED_REASON = "The portal stopped before the call ended; the server may or may not have carried it out."
NOT_ASKED_REASON = "The portal stopped while the call waited for your approval; call the tool again."


def do_interrupt_approvals() -> int:
    """The whole portal stops (the embedded mode): every approval still waiting ends as interrupted,
    and its call with it, each audited. Returns how many. (In the distributed mode approvals belong
    to no worker: a worker that stops leaves them to the others.)"""
    ended = 0
    with transaction.atomic():
        waiting = (
            Approval.objects.select_for_update(of=("self",))
            .select_related("call__server", "call__user")
            .filter(state=ApprovalState.PENDING)
        )
        for approval in waiting:
            approval.state = ApprovalState.INTERRUPTED
            approval.answered_at = timezone.now()
            approval.save(update_fields=["state", "answered_at"])
            decision = {**approval.decision, "effect": "interrupted"}
            audit.record_for_call(AuditKind.APPROVAL, approval.call, decision=decision, outcome=CallStatus.INTERRUPTED)
            _end_waiting_call(approval.call, CallStatus.INTERRUPTED, NOT_ASKED_REASON, "interrupted")
            events.publish_on_commit(approval.call.user_id, _ended_event(approval))
            ended += 1
    return ended


def do_clear_connection_statuses(worker: str) -> int:
    """A worker stopped: the connections it reported are gone with it (none may show "connected" after)."""
    deleted, _ = ConnectionStatus.objects.filter(worker=worker).delete()
    return deleted
