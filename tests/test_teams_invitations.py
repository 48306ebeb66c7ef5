"""Inviting by email: the link is shown once and mailed, works once, for 7 days, for that address."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.utils import timezone

from servers.models import Invitation
from servers.team_actions import hash_token
from sessions.models import AuditEvent
from tests.teams import TeamPages, membership

pytestmark = pytest.mark.django_db


def test_an_admin_invites_and_the_invitee_signs_up_through_the_link_with_signup_closed(
    settings, alice, acme, django_capture_on_commit_callbacks
):
    settings.PORTAL_SIGNUP_OPEN = False
    with django_capture_on_commit_callbacks(execute=True):
        link = TeamPages(alice).invite(acme, "dana@example.com", "member")
    assert link
    # Mailed through Django's mail backend, with the same link.
    assert len(mail.outbox) == 1 and mail.outbox[0].to == ["dana@example.com"] and link in mail.outbox[0].body
    # Only the hash is stored.
    invitation = Invitation.objects.get()
    token = link.rstrip("/").rsplit("/", 1)[1]
    assert invitation.token_hash == hash_token(token) and token not in invitation.token_hash

    invitee = TeamPages()
    page = invitee.open(link)
    assert "Join Acme" in page.content.decode() and "Sign up as dana@example.com" in page.content.decode()
    signed_up = invitee.sign_up_through(link, "dana", "dana@example.com")
    assert signed_up.status_code == 302, signed_up.content.decode()[:2000]
    dana = get_user_model().objects.get(username="dana")
    assert membership(dana, acme).role == "member"
    assert Invitation.objects.get().state == "accepted"
    assert list(AuditEvent.objects.filter(kind="membership").values_list("outcome", "username").order_by("id")) == [
        ("invited", "alice"),
        ("joined", "dana"),
    ]


def test_the_link_opens_signup_only_for_the_invited_address(settings, alice, acme):
    settings.PORTAL_SIGNUP_OPEN = False
    link = TeamPages(alice).invite(acme, "dana@example.com")
    other = TeamPages().sign_up_through(link, "mallory", "mallory@example.com")
    assert "the address the invitation was sent to" in other.content.decode()
    assert not get_user_model().objects.filter(username="mallory").exists()


def test_without_a_link_signup_stays_closed(settings):
    settings.PORTAL_SIGNUP_OPEN = False
    page = TeamPages().client.get("/accounts/signup/")
    assert "Sign up is closed" in page.content.decode()


def test_an_existing_account_logs_in_and_accepts(alice, bob, acme, make_user):
    dana = make_user("dana", team="Globex")
    link = TeamPages(alice).invite(acme, "dana@example.com", "auditor")
    accepted = TeamPages(dana).accept(link)
    assert accepted.status_code == 302
    assert membership(dana, acme).role == "auditor"
    assert membership(dana, "Globex") is not None  # several teams per person


def test_a_used_link_is_refused(alice, acme, make_user):
    dana = make_user("dana", team=None)
    link = TeamPages(alice).invite(acme, "dana@example.com")
    assert TeamPages(dana).accept(link).status_code == 302
    again = TeamPages(dana)
    assert again.open(link).status_code == 410
    refused = again.accept(link)
    assert refused.status_code == 403 and "used already" in refused.content.decode()


def test_an_expired_link_is_refused(alice, acme, make_user):
    dana = make_user("dana", team=None)
    link = TeamPages(alice).invite(acme, "dana@example.com")
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    pages = TeamPages(dana)
    assert pages.open(link).status_code == 410
    refused = pages.accept(link)
    assert refused.status_code == 403 and "expired" in refused.content.decode()
    assert membership(dana, acme) is None


def test_links_last_seven_days(alice, acme):
    TeamPages(alice).invite(acme, "dana@example.com")
    invitation = Invitation.objects.get()
    assert timedelta(days=7) - (invitation.expires_at - invitation.created_at) < timedelta(seconds=5)


def test_a_revoked_link_is_refused(alice, acme, make_user):
    dana = make_user("dana", team=None)
    pages = TeamPages(alice)
    link = pages.invite(acme, "dana@example.com")
    invitation = Invitation.objects.get()
    pages.client.post(f"/teams/invitations/{invitation.pk}/revoke/")
    assert Invitation.objects.get().state == "revoked"
    assert TeamPages(dana).accept(link).status_code == 403
    assert AuditEvent.objects.filter(kind="membership", outcome="invitation_revoked").exists()


def test_a_member_cannot_invite(alice, bob, acme, django_capture_on_commit_callbacks):
    pages = TeamPages(bob)
    with django_capture_on_commit_callbacks(execute=True):
        assert pages.invite(acme, "dana@example.com") == ""
    assert pages.last.status_code == 403
    assert not Invitation.objects.exists() and not mail.outbox


def test_the_link_is_shown_once(alice, acme):
    pages = TeamPages(alice)
    link = pages.invite(acme, "dana@example.com")
    assert link not in pages.client.get(f"/teams/{acme.pk}/").content.decode()
