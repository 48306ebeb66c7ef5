"""Attacks on the team model: each test is the attack, and the portal's refusal."""

from __future__ import annotations

import secrets

import pytest
from django.test import Client

from servers.models import Invitation, Membership, Team
from sessions.models import AuditEvent
from tests.teams import TeamPages, membership, path_of

pytestmark = pytest.mark.django_db


def test_a_member_who_saw_a_colleagues_link_cannot_accept_it_for_themselves(alice, bob, acme, make_user):
    # Bob, a member, got hold of the link mailed to dana and posts it, hoping to be made an admin.
    link = TeamPages(alice).invite(acme, "dana@example.com", "admin")
    forged = TeamPages(bob).accept(link)
    assert forged.status_code == 403 and "for dana@example.com" in forged.content.decode()
    assert membership(bob, acme).role == "member"
    assert Invitation.objects.get().state == "pending"  # still dana's to use


def test_a_stranger_cannot_sign_up_with_their_own_address_through_someone_elses_link(settings, alice, acme):
    settings.PORTAL_SIGNUP_OPEN = False
    link = TeamPages(alice).invite(acme, "dana@example.com")
    attempt = TeamPages().sign_up_through(link, "mallory", "mallory@example.com")
    assert attempt.status_code == 200 and "the address the invitation was sent to" in attempt.content.decode()
    assert not Membership.objects.filter(user__username="mallory").exists()


def test_an_admin_of_one_team_cannot_touch_another_teams_members(alice, bob, carol, acme):
    # Carol administers Globex; she tries every member change on Acme by id.
    link = TeamPages(alice).invite(acme, "dana@example.com")
    invitation = Invitation.objects.get()
    pages = TeamPages(carol)
    for path, data in [
        (f"/teams/members/{membership(bob, acme).pk}/role/", {"role": "admin"}),
        (f"/teams/members/{membership(alice, acme).pk}/remove/", {}),
        (f"/teams/invitations/{invitation.pk}/revoke/", {}),
        (f"/teams/{acme.pk}/invite/", {"email": "carol2@example.com", "role": "admin"}),
        (f"/teams/{acme.pk}/rename/", {"name": "Pwned"}),
        (f"/teams/{acme.pk}/delete/", {}),
    ]:
        assert pages.client.post(path, data).status_code == 404, path
    assert pages.client.get(f"/teams/{acme.pk}/").status_code == 404
    assert membership(bob, acme).role == "member" and membership(alice, acme).role == "admin"
    assert Team.objects.get(pk=acme.pk).name == "Acme" and Invitation.objects.get().state == "pending"
    assert Invitation.objects.count() == 1 and link


def test_a_member_cannot_promote_themselves_nor_invite_a_second_self_as_admin(alice, bob, acme):
    pages = TeamPages(bob)
    pages.set_role(membership(bob, acme), "admin")
    assert pages.invite(acme, "bob+admin@example.com", "admin") == ""
    assert membership(bob, acme).role == "member" and not Invitation.objects.exists()


def test_a_used_link_cannot_bring_a_removed_member_back(alice, acme, make_user):
    dana = make_user("dana", team=None)
    link = TeamPages(alice).invite(acme, "dana@example.com", "admin")
    assert TeamPages(dana).accept(link).status_code == 302
    TeamPages(alice).remove(membership(dana, acme))
    assert TeamPages(dana).accept(link).status_code == 403
    assert membership(dana, acme) is None
    assert AuditEvent.objects.filter(outcome="joined").count() == 1


def test_links_cannot_be_guessed_or_rebuilt_from_the_database(alice, acme):
    link = TeamPages(alice).invite(acme, "dana@example.com")
    token = path_of(link).rstrip("/").rsplit("/", 1)[1]
    row = Invitation.objects.values().get()
    assert all(token not in str(value) for value in row.values())
    client = Client()
    for guess in (secrets.token_urlsafe(32), row["token_hash"], "x" * 500):
        assert client.get(f"/teams/join/{guess}/").status_code == 410


def test_an_auditor_sees_no_secrets_and_cannot_store_any(alice, bob, acme, demo_server):
    from servers.credentials.actions import do_set_secret

    do_set_secret(demo_server, "API_KEY", "team-secret-value", by=alice, team=acme)
    TeamPages(alice).set_role(membership(bob, acme), "auditor")
    client = TeamPages(bob).client
    page = client.get("/credentials/").content.decode()
    assert "team-secret-value" not in page and "demo" not in page
    stored = client.post(f"/credentials/{demo_server.pk}/secret/", {"name": "MINE", "value": "x"})
    assert stored.status_code == 404
