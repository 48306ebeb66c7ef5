"""What every page's navigation shows about the person (templates/base.html)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from .models import Approval, ApprovalState


def approvals_waiting(request: HttpRequest) -> dict[str, Any]:
    """The nav's count of calls waiting for the person's answer: one COUNT, and none for visitors.

    Overdue ones are left out even before their expiry task ends them; static/approvals-badge.js
    keeps the count live after the page is drawn."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    waiting = Approval.objects.filter(user=user, state=ApprovalState.PENDING, expires_at__gt=timezone.now())
    return {"approvals_waiting": waiting.count()}
