"""The approvals inbox: every call of the person's that waits for an answer, wherever it came from.

Agents' calls through the MCP endpoint are held until the person answers here (or in the playground);
static/approvals.js keeps the page live over the portal's socket, and the forms work without it.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from . import actions

ANSWERED = {"allow_once": "Allowed once", "always_allow": "Always allowed", "deny": "Denied"}


@login_required
def approvals(request: HttpRequest) -> HttpResponse:
    # The same events the socket sends (Approval.as_event), so the page and approvals.js show one card.
    waiting = [_card(event) for event in actions.do_pending_approval_events(request.user)]
    return render(request, "sessions/approvals.html", {"groups": _grouped(waiting), "waiting": waiting})


@login_required
@require_POST
def answer_approvals(request: HttpRequest) -> HttpResponse:
    """One answer to one approval, or allow_once to several ("Allow all once" for one tool)."""
    answer = request.POST.get("answer", "")
    ids = request.POST.getlist("approval")
    if not ids:
        messages.error(request, "Unknown approval.")
    if len(ids) > 1 and answer != "allow_once":
        messages.error(request, "Only Allow once answers several approvals at a time.")
        return redirect("approvals")
    answered = []
    for approval_id in ids:
        try:
            answered.append(actions.do_answer_approval(request.user, approval_id, answer))
        except actions.ApprovalError as exc:
            messages.error(request, str(exc))
    if len(answered) == 1:
        call = answered[0].call
        messages.success(request, f"{ANSWERED[answer]}: {call.server_name} · {call.tool}.")
    elif answered:
        messages.success(request, f"{ANSWERED[answer]}: {len(answered)} calls.")
    return redirect("approvals")


def asked_by(event: dict[str, Any]) -> str:
    """Who asked, in the person's words: the playground, or the agent's client by name and version."""
    if event.get("via") == "playground":
        return "Playground"
    return event.get("client") or "An MCP client"


def _card(event: dict[str, Any]) -> dict[str, Any]:
    hints = event["annotations"]
    return {
        **event,
        "asked_by": asked_by(event),
        "arguments_json": json.dumps(event["arguments"], indent=2, ensure_ascii=False),
        "hints": ", ".join(f"{name}: {json.dumps(value)}" for name, value in hints.items()),
    }


def _grouped(cards: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cards by server and tool, oldest first, so several waiting calls of one tool can be allowed at once."""
    groups: dict[tuple[Any, str], dict[str, Any]] = {}
    for card in cards:
        key = (card["server"], card["tool"])
        group = groups.setdefault(key, {"server_name": card["server_name"], "tool": card["tool"], "cards": []})
        group["cards"].append(card)
    return list(groups.values())
