"""The server registry in real Chromium: the form's transport switch and errors, HTTP servers,
failed connection tests, and what a plain member of the team may do."""

from __future__ import annotations

import re
import sys

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import TIMEOUT_MS, log_in
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


def test_it_shows_form_errors_and_registers_an_http_server(page: Page, alice, demo_http_url):
    log_in(page, "alice", "pw-alice")
    page.goto("/servers/add/")

    # Only the chosen transport's fields are on screen (server-form.js).
    expect(page.get_by_label("Command", exact=True)).to_be_visible()
    expect(page.get_by_label("URL", exact=True)).to_be_hidden()
    page.get_by_label("Streamable HTTP").check()
    expect(page.get_by_label("Command", exact=True)).to_be_hidden()
    expect(page.get_by_label("URL", exact=True)).to_be_visible()

    # Nothing filled in: each message sits beside its own field, and the HTTP choice survives.
    page.get_by_role("button", name="Register server").click()
    name_field = page.locator(".field").filter(has=page.get_by_label("Name", exact=True))
    url_field = page.locator(".field").filter(has=page.get_by_label("URL", exact=True))
    expect(name_field.get_by_role("alert")).to_have_text("This field is required.")
    expect(url_field.get_by_role("alert")).to_have_text("Enter the server's URL.")
    expect(page.get_by_label("Streamable HTTP")).to_be_checked()
    expect(page.get_by_label("URL", exact=True)).to_be_visible()

    page.get_by_label("Name", exact=True).fill("demo-http")
    page.get_by_label("URL", exact=True).fill("ftp://example.com/mcp")
    page.get_by_role("button", name="Register server").click()
    expect(url_field.get_by_role("alert")).to_have_text("Enter a valid http:// or https:// URL.")

    page.get_by_label("URL", exact=True).fill(demo_http_url)
    page.get_by_role("button", name="Register server").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("demo-http")
    expect(page.locator("dl.facts")).to_contain_text(demo_http_url)

    page.get_by_role("button", name="Test connection").click()
    expect(page.locator("#test-result")).to_contain_text("connected")
    expect(page.locator("#test-result")).to_contain_text("portal-demo")
    assert page.problems == []


def test_it_shows_why_a_connection_test_failed(page: Page, alice):
    from servers.models import Server

    # A stdio "server" that writes to stderr and exits: the page should say so, with the stderr.
    server = Server.objects.create(
        team=alice.memberships.get().team,
        name="broken",
        transport="stdio",
        command=sys.executable,
        args=["-c", "import sys; sys.stderr.write('no such config file\\n'); sys.exit(2)"],
        cwd=str(ROOT),
        request_timeout=10,
        created_by=alice,
        # `python -c` is no template a team admin may fill: an operator registered this one.
        command_set_by_operator=True,
    )
    log_in(page, "alice", "pw-alice")
    page.goto(f"/servers/{server.pk}/")
    page.get_by_role("button", name="Test connection").click()

    result = page.locator("#test-result")
    expect(result.locator(".badge.error")).to_be_visible()
    expect(result.get_by_text("Server stderr (last lines)")).to_be_visible()
    expect(result.locator("pre")).to_contain_text("no such config file")
    expect(page.get_by_role("button", name="Test connection")).to_be_enabled()

    # The list shows the failure too, once the page is loaded again.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Servers").click()
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="broken"))
    expect(row.locator(".badge.error")).to_have_count(1)
    assert page.problems == []


def test_a_member_can_use_but_not_administer_a_server(page: Page, alice, bob, demo_server):
    log_in(page, "bob", "pw-bob")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Servers").click()
    expect(page.get_by_role("link", name="Add a server")).to_have_count(0)
    row = page.get_by_role("row").filter(has=page.get_by_role("link", name="demo", exact=True))
    expect(row.get_by_role("link", name="Edit")).to_have_count(0)
    expect(row.get_by_role("button", name=re.compile("^Disable"))).to_have_count(0)

    row.get_by_role("link", name="demo", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("demo")
    for name in ("Test connection", "Disable"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    expect(page.get_by_role("link", name="Delete")).to_have_count(0)

    # Using it is fine: the playground calls the tool for bob.
    page.get_by_role("link", name="Open in playground").click()
    page.get_by_role("list", name="Tools").get_by_role("button", name="Echo").click()
    page.get_by_label("Message").fill("hello from bob")
    page.get_by_role("button", name="Call tool").click()
    expect(page.locator("#call-status")).to_contain_text("Succeeded")
    expect(page.locator("#result .text-block")).to_have_text("hello from bob")
    assert page.problems == []


def test_a_disabled_server_leaves_the_playground(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    page.goto(f"/servers/{demo_server.pk}/")
    page.get_by_role("button", name="Disable").click()
    expect(page.get_by_role("status").filter(has_text="demo is now disabled.")).to_be_visible()
    expect(page.get_by_role("heading", level=1)).to_contain_text("disabled")
    expect(page.get_by_role("link", name="Open in playground")).to_have_count(0)

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Playground").click()
    expect(page.get_by_text("No enabled servers.")).to_be_visible()
    expect(page.get_by_label("Server", exact=True)).to_be_disabled()

    page.goto(f"/servers/{demo_server.pk}/")
    page.get_by_role("button", name="Enable").click()
    expect(page.get_by_role("status").filter(has_text="demo is now enabled.")).to_be_visible()
    expect(page.get_by_role("link", name="Open in playground")).to_be_visible()
    assert page.problems == []
