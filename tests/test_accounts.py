"""Accounts and teams: signup (closable), the first account as admin, superusers, the Django admin."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client

from servers.models import Membership

pytestmark = pytest.mark.django_db


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


def test_the_first_account_is_admin_of_the_default_team_and_later_ones_are_members():
    assert signup(Client(), "first").status_code == 302
    assert signup(Client(), "second").status_code == 302
    first, second = (Membership.objects.get(user__username=name) for name in ("first", "second"))
    assert first.team.name == "Default team" and first.role == "admin"
    assert second.team == first.team and second.role == "member"


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


def test_login_page_labels_every_input():
    page = Client().get("/accounts/login/").content.decode()
    assert '<label for="id_login">' in page and '<label for="id_password">' in page


def test_password_reset_mails_go_to_the_console_backend_by_default(alice):
    import portal.settings as configured  # the test runner swaps in locmem; the module says what `make run` uses

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
