"""Connecting an account to an OAuth-protected server in real Chromium: "Connect your account" opens
the authorization server's consent page, Allow brings the person back to where they were, and the
next call carries their own token."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from servers.credentials.models import Credential
from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.browser.test_playground_browser import call_status, open_playground, pick_tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


def after_test_connection(page: Page, server) -> None:
    """Test connection on the server's page: the server asks for authorization, so the portal knows
    it uses OAuth and offers "Connect your account" (an HTTP server that never asked is not)."""
    page.goto(f"/servers/{server.pk}/")
    page.get_by_role("button", name="Test connection").click()
    expect(page.locator("#test-result")).to_contain_text("needs auth")


def test_connect_goes_through_the_consent_page_and_back_and_calls_as_that_user(
    page: Page, alice, oauth_server, oauth_base
):
    log_in(page, "alice", "pw-alice")
    page.goto("/credentials/")
    expect(page.locator(f"#server-{oauth_server.pk}")).not_to_contain_text("Connect your account")
    after_test_connection(page, oauth_server)
    page.goto("/credentials/")
    card = page.locator(f"#server-{oauth_server.pk}")
    expect(card.get_by_text("not connected", exact=True)).to_be_visible()
    # Nothing to revoke yet, and not "ready": whether the server needs an account is known only later.
    expect(card.get_by_role("button", name="Revoke")).to_have_count(0)
    expect(card.get_by_text("ready", exact=True)).to_have_count(0)
    card.get_by_role("button", name="Connect your account").click()

    # The authorization server's own page, in the same tab (the portal only redirected there).
    expect(page.get_by_role("heading", name="Authorize MCP Portal?")).to_be_visible()
    assert page.url.startswith(oauth_base + "/authorize?"), page.url
    assert "code_challenge_method=S256" in page.url and "state=" in page.url
    page.get_by_label("Your name").fill("alice-at-idp")
    page.get_by_role("button", name="Allow").click()

    # Back on the portal, on the card the person left from, now connected.
    page.wait_for_url(re.compile(r"/credentials/"))
    expect(card.get_by_text("connected", exact=True)).to_be_visible()
    expect(card.get_by_role("button", name="Connect again")).to_be_visible()
    expect(card.get_by_role("button", name="Revoke")).to_be_visible()
    expect(card.get_by_text("ready", exact=True)).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "credentials.png"))
    credential = Credential.objects.get(server=oauth_server, user=alice, kind="oauth")
    tokens = credential.open_json()["tokens"]
    # The browser saw neither token, on this page or any other.
    assert tokens["access_token"] not in page.content() and tokens["refresh_token"] not in page.content()

    open_playground(page, oauth_server)
    pick_tool(page, "whoami")
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result")).to_contain_text("alice-at-idp")
    assert page.problems == []


def test_deny_on_the_consent_page_comes_back_saying_so(page: Page, alice, oauth_server):
    log_in(page, "alice", "pw-alice")
    after_test_connection(page, oauth_server)
    page.goto("/credentials/")
    card = page.locator(f"#server-{oauth_server.pk}")
    card.get_by_role("button", name="Connect your account").click()
    page.get_by_role("button", name="Deny").click()
    page.wait_for_url(re.compile(r"/credentials/"))
    expect(page.get_by_text(re.compile("access_denied|denied", re.I)).first).to_be_visible()
    expect(card.get_by_text("not connected", exact=True)).to_be_visible()
    expect(card.get_by_role("button", name="Revoke")).to_have_count(0)
    # Denied: no tokens were stored for alice (a row may remain, to carry the error).
    assert not Credential.objects.filter(server=oauth_server, user=alice, kind="oauth", has_tokens=True).exists()
