"""Accounts and teams: signup (closable), the first account as admin, superusers, the Django admin."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from servers.credentials.crypto import new_key_line
from servers.models import Membership
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db


def default_settings(mode: str, *names: str) -> list:
    """Settings as `mode` computes them when the operator has not set them (a fresh interpreter: the
    mode is chosen when the settings module loads; nothing is connected to)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PORTAL_SIGNUP", "DJANGO_SETTINGS"))}
    env.pop("DATABASE_URL", None), env.pop("REDIS_URL", None)
    if mode == "distributed":
        env.update(
            DATABASE_URL="postgres://portal@127.0.0.1:1/portal",
            REDIS_URL="redis://127.0.0.1:1/0",
            DJANGO_SECRET_KEY="x" * 50,
            PORTAL_ENCRYPTION_KEYS=new_key_line(),
        )
    code = f"import json, portal.settings as s; print(json.dumps([s.PORTAL_MODE] + [getattr(s, n) for n in {list(names)!r}]))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found[0] == mode
    return found[1:]


def signup(client: Client, username: str):
    return client.post(
        "/accounts/signup/",
        {
            "username": username,
            "email": f"{username}@example.com",
            "password1": "a-long-passphrase-1",
            "password2": "a-long-passphrase-1",
        },
    )


def test_a_new_account_joins_no_team_and_is_told_how_to_join_one(settings):
    settings.PORTAL_SIGNUP_OPEN = True  # closed by default in the distributed mode
    client = Client()
    assert signup(client, "newcomer").status_code == 302
    assert not Membership.objects.exists()
    page = client.get("/", follow=True)
    assert page.status_code == 200
    assert "You are not in a team yet" in page.content.decode()
    for path in ("/servers/", "/playground/resources/", "/playground/prompts/"):
        assert "You are not in a team yet" in client.get(path).content.decode(), path


def test_new_accounts_join_the_team_the_operator_names_as_members(settings):
    settings.PORTAL_SIGNUP_OPEN = True  # closed by default in the distributed mode
    settings.PORTAL_SIGNUP_TEAM = "Everyone"
    assert signup(Client(), "first").status_code == 302
    assert signup(Client(), "second").status_code == 302
    first, second = (Membership.objects.get(user__username=name) for name in ("first", "second"))
    # The team had no admin: the first to sign up is still only a member.
    assert (first.team.name, first.role) == ("Everyone", "member")
    assert (second.team, second.role) == (first.team, "member")


def test_signup_is_open_in_the_embedded_mode_and_closed_in_the_distributed_mode_by_default():
    assert default_settings("embedded", "PORTAL_SIGNUP_OPEN", "PORTAL_SIGNUP_TEAM") == [True, ""]
    assert default_settings("distributed", "PORTAL_SIGNUP_OPEN", "PORTAL_SIGNUP_TEAM") == [False, ""]


def test_signup_can_be_closed(settings):
    settings.PORTAL_SIGNUP_OPEN = False
    response = signup(Client(), "nobody")
    assert b"Sign up is closed" in response.content
    assert not get_user_model().objects.exists()


def test_a_createsuperuser_account_becomes_admin_when_it_logs_in():
    get_user_model().objects.create_superuser("root", "root@example.com", "root-pass-123")
    client = Client()
    response = client.post("/accounts/login/", {"login": "root", "password": "root-pass-123"})
    assert response.status_code == 302
    assert Membership.objects.get(user__username="root").role == "admin"


def test_an_account_with_no_team_stays_without_one_when_it_logs_in(make_user):
    make_user("loner", team=None)
    client = Client()
    assert client.post("/accounts/login/", {"login": "loner", "password": "pw-loner"}).status_code == 302
    assert not Membership.objects.exists()


def test_the_admin_login_page_is_allauths(alice):
    root = get_user_model().objects.create_superuser("root", "root@example.com", "root-pass-123")
    client = Client()
    response = client.get("/admin/login/?next=/admin/servers/server/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=%2Fadmin%2Fservers%2Fserver%2F"
    # A logged-in person who is not staff is told so, rather than sent round to a login page.
    client.force_login(alice)
    refused = client.get("/admin/login/")
    assert refused.status_code == 403 and "for operators" in refused.content.decode()
    client.force_login(root)
    assert client.get("/admin/login/")["Location"] == "/admin/"


def test_login_page_labels_every_input():
    page = Client().get("/accounts/login/").content.decode()
    assert '<label for="id_login">' in page and '<label for="id_password">' in page


def test_password_reset_mails_go_to_the_console_backend_by_default(alice, settings):
    import portal.settings as configured  # the test runner swaps in locmem; the module says what `make run` uses

    # With signup closed (the distributed mode's default) too: only signup is limited to invited addresses.
    settings.PORTAL_SIGNUP_OPEN = False

    assert configured.EMAIL_BACKEND == "django.core.mail.backends.console.EmailBackend"
    Client().post("/accounts/password/reset/", {"email": "alice@example.com"})
    assert len(mail.outbox) == 1 and "alice" in mail.outbox[0].body


def test_the_django_admin_is_for_superusers_only(alice):
    client = Client()
    client.force_login(alice)
    assert client.get("/admin/").status_code == 302
    get_user_model().objects.filter(pk=alice.pk).update(is_staff=True, is_superuser=True)
    assert client.get("/admin/").status_code == 200


def test_logout_is_a_post(alice):
    client = Client()
    client.force_login(alice)
    assert client.post("/accounts/logout/").status_code == 302
    assert client.get("/servers/").status_code == 302
