from __future__ import annotations

import asyncio

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode

from portal.celery import app as celery_app
from sessions.affinity import last_heartbeat


def home(request: HttpRequest) -> HttpResponse:
    return redirect("playground" if request.user.is_authenticated else "account_login")


def admin_login(request: HttpRequest) -> HttpResponse:
    """The Django admin's login page, replaced: everyone logs in through allauth's page, with its rate
    limits and lockout (the admin's own form has neither). A POST here logs no one in."""
    if request.user.is_authenticated:
        if request.user.is_active and request.user.is_staff:
            return redirect("admin:index")
        # Sending them to the login page would bring them straight back here (they are logged in).
        return render(request, "admin_refused.html", status=403)
    next_url = request.GET.get("next") or reverse("admin:index")
    return redirect(f"{reverse('account_login')}?{urlencode({'next': next_url})}")


async def _channel_layer_round_trip() -> None:
    layer = get_channel_layer()
    channel = await layer.new_channel("healthz.")
    await layer.send(channel, {"type": "healthz.ping"})
    await asyncio.wait_for(layer.receive(channel), 2.0)


def _check(fn) -> dict[str, object]:
    try:
        detail = fn()
    except Exception as exc:  # noqa: BLE001 - a health check reports, it does not raise
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, **(detail or {})}


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def _broker() -> None:
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)


def _worker() -> dict[str, object]:
    beat = last_heartbeat()
    if beat is None:
        raise RuntimeError("no worker has reported in the last few seconds")
    return {"last_seen": beat}


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness of every part a tool call needs; 200 only when all of them are up."""
    checks = {
        "database": _check(_database),
        "channel_layer": _check(async_to_sync(_channel_layer_round_trip)),
        "broker": _check(_broker),
        "worker": _check(_worker),
    }
    healthy = all(check["ok"] for check in checks.values())
    return JsonResponse({"ok": healthy, **checks}, status=200 if healthy else 503)
