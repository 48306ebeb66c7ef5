"""Connect an agent in real Chromium: a token made on the page is shown once, copied by its button,
and gone from the page after; revoking it is refused by the endpoint's check at once."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from sessions.access_tokens import check_token
from sessions.models import AccessToken
from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


def test_a_token_made_on_the_page_is_shown_once_copied_and_then_only_named(page: Page, alice, demo_server, live_portal):
    log_in(page, "alice", "pw-alice")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Agents").click()
    expect(page.get_by_role("heading", name="Connect an agent")).to_be_visible()
    expect(page.locator("#server-endpoints")).to_contain_text(f"{live_portal['url']}/mcp/demo/")

    page.get_by_label("Name").fill("laptop Claude Code")
    page.get_by_label("demo (Acme)").check()
    page.get_by_label("Expires after (days)").fill("90")
    page.get_by_role("button", name="Create token").click()

    shown = page.get_by_role("textbox", name="Your new token")
    expect(shown).to_have_value(re.compile(r"^mcpp_[A-Za-z0-9_-]{43}$"))
    text = shown.input_value()
    assert check_token(text).user == alice
    # The setup is ready to paste, with this portal's address and the token.
    header_form = page.locator('pre[data-client="Claude Code, with a token"]')
    expect(header_form).to_have_text(
        f'claude mcp add --transport http portal {live_portal["url"]}/mcp/ --header "Authorization: Bearer {text}"'
    )
    row = page.locator("#token-list tbody tr").first
    expect(row).to_contain_text("laptop Claude Code")
    expect(row).to_contain_text("demo")
    expect(row.locator(".badge")).to_have_text("active")

    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_portal["url"])
    page.locator("#new-token").get_by_role("button", name="Copy").click()
    expect(page.locator("#new-token").get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == text
    page.screenshot(path=str(SCREENSHOTS / "connect-agent.png"))

    # Back on the page later: the token is named, never shown.
    page.goto("/agents/")
    expect(page.get_by_role("textbox", name="Your new token")).to_have_count(0)
    assert text not in page.content()
    token = AccessToken.objects.get(user=alice)
    expect(row).to_contain_text(f"{token.prefix}…")
    expect(page.locator('pre[data-client="Claude Code, with a token"]')).to_contain_text("Bearer <your token>")

    row.get_by_role("button", name="Revoke laptop Claude Code").click()
    expect(page.get_by_role("status")).to_contain_text("Revoked laptop Claude Code")
    expect(row.locator(".badge")).to_have_text("revoked")
    assert check_token(text) is None
    assert page.problems == []
