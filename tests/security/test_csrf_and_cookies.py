"""Another site's page posting a portal form in a logged-in person's browser, and the cookies it could
read or send along (docs/security.md, "Web").

Django's test client skips CSRF checks unless asked: these clients enforce them, as a browser meets them.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.test import Client

from tests.conftest import ROOT
from tests.helpers import logged_in

pytestmark = pytest.mark.django_db


def logged_in_browser(user) -> Client:
    """Logged in, and refused without a CSRF token as a browser's request would be."""
    return logged_in(user, enforce_csrf_checks=True)


def csrf_token(client: Client, page: str) -> str:
    """What the portal's own page puts in its forms (and the csrftoken cookie beside it)."""
    assert client.get(page).status_code == 200
    return client.cookies["csrftoken"].value


def test_a_form_posted_from_another_site_is_refused(alice, demo_server):
    client = logged_in_browser(alice)
    forged = client.post(f"/servers/{demo_server.pk}/toggle/")
    demo_server.refresh_from_db()
    assert forged.status_code == 403 and demo_server.enabled

    # The same post from the portal's own page, with its token, goes through.
    token = csrf_token(client, f"/servers/{demo_server.pk}/")
    real = client.post(f"/servers/{demo_server.pk}/toggle/", {"csrfmiddlewaretoken": token})
    demo_server.refresh_from_db()
    assert real.status_code == 302 and not demo_server.enabled


def test_another_site_cannot_log_a_person_out(alice):
    client = logged_in_browser(alice)
    assert client.post("/accounts/logout/").status_code == 403
    assert client.get("/accounts/logout/").status_code == 200  # a GET only asks to confirm
    assert client.get("/servers/").status_code == 200  # still logged in

    token = csrf_token(client, "/servers/")
    assert client.post("/accounts/logout/", {"csrfmiddlewaretoken": token}).status_code == 302
    assert client.get("/servers/").status_code == 302  # logged out: sent to the login page


def log_in(client: Client, username: str, password: str):
    client.get("/accounts/login/")
    token = client.cookies["csrftoken"].value
    answer = client.post("/accounts/login/", {"login": username, "password": password, "csrfmiddlewaretoken": token})
    assert answer.status_code == 302, answer.content[:500]
    return answer


@pytest.mark.parametrize("secure", [False, True])
def test_session_and_csrf_cookies_are_httponly_and_samesite_lax(alice, settings, secure):
    settings.SESSION_COOKIE_SECURE = settings.CSRF_COOKIE_SECURE = secure
    client = Client(enforce_csrf_checks=True)
    csrf = client.get("/accounts/login/").cookies["csrftoken"]
    session = log_in(client, "alice", "pw-alice").cookies["sessionid"]
    for cookie in (csrf, session):
        assert cookie["httponly"] is True, cookie.key  # no script on a page can read it
        assert cookie["samesite"] == "Lax", cookie.key  # not sent on another site's form post
        assert bool(cookie["secure"]) is secure, cookie.key


@pytest.mark.parametrize(
    ("environment", "secure"),
    [
        ({}, False),
        ({"PORTAL_SECURE_COOKIES": "1"}, True),
        (
            {
                "DATABASE_URL": "postgres://x@127.0.0.1:1/x",
                "REDIS_URL": "redis://127.0.0.1:1/0",
                "DJANGO_SECRET_KEY": "a-test-only-secret-key-that-is-long-enough-0123456789",
                "PORTAL_ENCRYPTION_KEYS": "t:dGVzdC1vbmx5LWtleS1ub3QtZm9yLXByb2R1Y3Rpb24=",
            },
            True,
        ),
    ],
    ids=["embedded", "asked-for", "distributed"],
)
def test_cookies_are_secure_in_the_distributed_mode_or_when_asked(environment, secure):
    # Settings are read from the environment when a process starts: ask a fresh one.
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "PORTAL_SECURE_COOKIES")}
    env.update(environment)
    probe = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SESSION_COOKIE_HTTPONLY, s.CSRF_COOKIE_HTTPONLY, "
        "s.SESSION_COOKIE_SAMESITE, s.CSRF_COOKIE_SAMESITE)"
    )
    found = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert found.returncode == 0, found.stderr[-2000:]
    assert found.stdout.split() == [str(secure), str(secure), "True", "True", "Lax", "Lax"]
