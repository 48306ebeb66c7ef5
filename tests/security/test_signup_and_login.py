"""Attacks on accounts: a stranger signing up to get into a team, and guessing passwords past the lockout."""

from __future__ import annotations

import random
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from servers.models import Membership, Role, Server, Team
from tests.helpers import login
from tests.test_accounts import default_settings, signup

pytestmark = pytest.mark.django_db

LOCKED = "Too many failed login attempts"


def attacker() -> Client:
    # allauth counts failures per address as well (ten a minute): each test guesses from an address of
    # its own, so only the per-account lockout is met; its counts outlive the test database (the cache).
    return Client(REMOTE_ADDR=f"10.{random.randrange(256)}.{random.randrange(256)}.{random.randrange(1, 255)}")


def target(make_user) -> str:
    """An account to guess at. Failures are counted per account id, in a cache that outlives the test
    database, while SQLite hands a rolled-back id out again: an id no other test's account gets."""
    name = f"target{uuid.uuid4().hex[:8]}"
    make_user(name, id=random.randrange(10**6, 10**9))
    return name


def test_a_stranger_who_signs_up_first_joins_no_team_and_administers_nothing(settings):
    # The distributed mode's defaults: signup closed, no team for new accounts.
    open_, team = default_settings("distributed", "PORTAL_SIGNUP_OPEN", "PORTAL_SIGNUP_TEAM")
    settings.PORTAL_SIGNUP_OPEN, settings.PORTAL_SIGNUP_TEAM = open_, team
    assert "Sign up is closed" in signup(Client(), "stranger").content.decode()
    assert not get_user_model().objects.exists()

    # The operator opens signup; the portal is fresh (no account yet), and a team stands with no admin.
    settings.PORTAL_SIGNUP_OPEN = True
    empty = Team.objects.create(name=settings.PORTAL_DEFAULT_TEAM)
    Server.objects.create(team=empty, name="demo", transport="stdio", command="true")
    assert signup(Client(), "stranger").status_code == 302
    stranger = get_user_model().objects.get(username="stranger")
    assert not Membership.objects.filter(user=stranger).exists()
    assert not Server.objects.visible_to(stranger).exists()
    client = Client()
    client.force_login(stranger)
    assert client.get("/servers/add/").status_code == 403

    # The operator names a team for signups: the next stranger is a member of it, still admin of nothing.
    settings.PORTAL_SIGNUP_TEAM = empty.name
    assert signup(Client(), "second").status_code == 302
    assert list(Membership.objects.values_list("user__username", "team__name", "role")) == [
        ("second", empty.name, Role.MEMBER)
    ]
    assert not Membership.objects.filter(role=Role.ADMIN).exists()


def test_an_account_locked_by_its_username_stays_locked_by_its_email(make_user):
    name = target(make_user)
    guesser = attacker()
    for _ in range(5):
        assert LOCKED not in login(guesser, name, "wrong").content.decode()
    # The right password, by the account's email, from another address: still locked.
    response = login(attacker(), f"{name}@example.com", "pw-" + name)
    assert response.status_code == 200 and LOCKED in response.content.decode()
    assert "_auth_user_id" not in response.client.session


def test_failures_by_username_and_by_email_count_together(make_user):
    name = target(make_user)
    other = target(make_user)
    guesser = attacker()
    for login_string in (name, f"{name}@example.com", name.upper(), f"{name}@EXAMPLE.com", name):
        login(guesser, login_string, "wrong")
    assert LOCKED in login(attacker(), name, "pw-" + name).content.decode()
    # Another account is not locked by them.
    assert login(attacker(), f"{other}@example.com", "pw-" + other).status_code == 302


def test_the_admin_login_form_cannot_be_used_to_guess_passwords(make_user):
    name = target(make_user)
    get_user_model().objects.filter(username=name).update(is_staff=True, is_superuser=True)
    guesser = attacker()
    # The admin's own form (no rate limit) is gone: even the right password logs no one in there.
    response = guesser.post("/admin/login/", {"username": name, "password": "pw-" + name, "next": "/admin/"})
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert "_auth_user_id" not in guesser.session
    # The page it leads to counts the guesses and locks the account after five.
    login_page = response["Location"]
    for _ in range(5):
        assert guesser.post(login_page, {"login": name, "password": "wrong"}).status_code == 200
    locked = attacker().post(login_page, {"login": name, "password": "pw-" + name})
    assert LOCKED in locked.content.decode()


def test_an_operator_still_reaches_the_admin_through_the_portals_login(make_user):
    name = target(make_user)
    get_user_model().objects.filter(username=name).update(is_staff=True, is_superuser=True)
    client = attacker()
    landing = client.get("/admin/", follow=True)
    assert landing.request["PATH_INFO"] == "/accounts/login/"
    response = client.post("/accounts/login/?next=/admin/", {"login": name, "password": "pw-" + name})
    assert response["Location"] == "/admin/"
    assert client.get("/admin/").status_code == 200
