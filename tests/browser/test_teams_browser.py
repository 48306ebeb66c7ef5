"""Running a team in real Chromium: an admin invites a colleague, who signs up through the link and
calls the team's server."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.browser.test_playground_browser import call_status, open_playground, pick_tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


def test_invite_accept_and_call(page: Page, browser, live_portal, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Teams").click()
    page.get_by_role("link", name="Acme").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Acme")
    page.get_by_label("Email address").fill("dana@example.com")
    page.get_by_label("Role", exact=True).select_option("member")
    page.get_by_role("button", name="Send invitation").click()

    link_field = page.get_by_role("textbox", name="Link to copy")
    expect(link_field).to_have_value(re.compile(r"/teams/join/[\w-]+/$"))
    link = link_field.input_value()
    expect(page.locator("#invitations")).to_contain_text("dana@example.com")
    page.screenshot(path=str(SCREENSHOTS / "teams.png"), full_page=True)

    # Dana, in a browser of her own, opens the link and signs up through it.
    context = browser.new_context(base_url=live_portal["url"])
    context.set_default_timeout(TIMEOUT_MS)
    dana = context.new_page()
    dana.goto(link)
    expect(dana.get_by_role("heading", level=1)).to_have_text("Join Acme")
    dana.get_by_role("link", name="Sign up as dana@example.com").click()
    dana.get_by_label("Email").fill("dana@example.com")
    dana.get_by_label("Username").fill("dana")
    dana.get_by_label("Password", exact=True).fill("a-long-passphrase-1")
    dana.get_by_label(re.compile("Password \\(again\\)")).fill("a-long-passphrase-1")
    dana.get_by_role("button", name="Sign up").click()
    dana.wait_for_url(re.compile(r"/teams/$"))
    expect(dana.get_by_role("link", name="Acme")).to_be_visible()

    open_playground(dana, demo_server)
    pick_tool(dana, "Echo")
    dana.get_by_label("Message").fill("hello from dana")
    dana.get_by_role("button", name="Call tool").click()
    expect(call_status(dana)).to_contain_text("Succeeded")
    expect(dana.locator("#result .text-block")).to_have_text("hello from dana")

    # The link worked once.
    dana.goto(link)
    expect(dana.get_by_role("heading", level=1)).to_have_text("This invitation cannot be used")
    context.close()
    assert page.problems == []
