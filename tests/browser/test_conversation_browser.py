"""A call is a conversation, in real Chromium: the server's form (elicitation) filled in, refused
while a field is wrong, then accepted; the Cancel button; and a 10 MB output cut before it
reaches the page, over Daphne's real WebSocket."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from sessions.models import Elicitation, ToolCall
from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.browser.test_playground_browser import call_status, open_playground, pick_tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


def test_it_fills_in_the_servers_form_shows_what_is_wrong_then_sends_it(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, re.compile(r"^Survey "))
    page.get_by_role("button", name="Call tool").click()

    form = page.get_by_role("form", name="A few questions, one of each kind")
    expect(form).to_be_visible()
    # The schema's defaults are filled in (the SDK leaves that to the client).
    expect(form.get_by_label("Website")).to_have_value("https://example.org")
    expect(form.get_by_label("Rating")).to_have_value("4.5")
    expect(form.get_by_label("Subscribe")).to_be_checked()
    expect(form.get_by_label("Size")).to_have_value("1")  # "Medium", by its title
    expect(form.get_by_label("Cheese")).to_be_checked()

    form.get_by_label("Name").fill("Ada")
    form.get_by_label("Email").fill("not an email")
    form.get_by_label("Birthday").fill("1815-12-10")
    form.get_by_label("Age").fill("36")
    form.get_by_label("Colour").select_option(label="green")
    form.get_by_label("Size").select_option(label="Large")
    form.get_by_label("Ham").check()
    form.get_by_role("button", name="Accept").click()

    # The browser refuses the email before anything is sent, beside its field.
    email_error = form.locator(".field", has=page.get_by_label("Email")).locator(".error")
    expect(email_error).not_to_be_empty()
    page.screenshot(path=str(SCREENSHOTS / "elicitation.png"), full_page=True)
    assert Elicitation.objects.get().state == "pending"

    form.get_by_label("Email").fill("ada@example.org")
    form.get_by_role("button", name="Accept").click()
    expect(form).to_be_hidden()
    expect(call_status(page)).to_contain_text("Succeeded")
    answered = json.loads(page.locator("#result .text-block").inner_text())
    assert answered["email"] == "ada@example.org"
    assert answered["size"] == "l"
    assert answered["toppings"] == ["cheese", "ham"]
    assert Elicitation.objects.get().state == "accept"
    assert page.problems == []


def test_the_portal_refuses_what_the_browser_let_through(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, re.compile(r"^Survey "))
    page.get_by_role("button", name="Call tool").click()
    form = page.get_by_role("form", name="A few questions, one of each kind")
    expect(form).to_be_visible()
    # Colour is required: the browser sends the form without it, and the portal's check names it.
    form.get_by_label("Name").fill("Ada")
    form.get_by_label("Email").fill("ada@example.org")
    form.get_by_label("Birthday").fill("1815-12-10")
    form.get_by_label("Age").fill("36")
    form.get_by_role("button", name="Accept").click()
    colour_error = form.locator(".field", has=page.get_by_label("Colour")).locator(".error")
    expect(colour_error).to_contain_text("colour")
    form.get_by_role("button", name="Decline").click()
    expect(form).to_be_hidden()
    expect(page.locator("#result")).to_contain_text("no answers (decline)")


def test_the_cancel_button_stops_a_running_call(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, re.compile(r"^Sleep "))
    page.get_by_label("Seconds").fill("60")
    page.get_by_role("button", name="Call tool").click()
    # Once the server's log says it sleeps, the request has surely reached it.
    expect(page.locator("#log-lines")).to_contain_text("sleeping 60 s")
    cancel = page.get_by_role("button", name="Cancel call")
    expect(cancel).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "cancel.png"), full_page=True)
    cancel.click()
    expect(call_status(page)).to_contain_text("Cancelled")
    expect(cancel).to_be_hidden()
    assert ToolCall.objects.get(tool="sleep").status == "cancelled"

    # The session is still usable.
    pick_tool(page, re.compile(r"^Echo "))
    page.get_by_label("Message").fill("after the cancel")
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    assert page.problems == []


def test_a_10_mb_output_arrives_cut_and_the_page_keeps_its_socket(page: Page, alice, demo_server):
    demo_server.protocol, demo_server.request_timeout = "legacy", 120
    demo_server.save()
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, re.compile(r"^Big output "))
    page.get_by_label("Size bytes").fill(str(10 * 1024 * 1024))
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded", timeout=120_000)
    expect(page.locator("#result")).to_contain_text("[OUTPUT TRUNCATED - exceeded 25000 token limit]")
    download = page.get_by_role("link", name="Download the full output")
    with page.expect_download() as caught:
        download.click()
    with open(caught.value.path()) as whole:
        assert len(json.load(whole)["content"][0]["text"]) == 10 * 1024 * 1024
    # The socket was not closed by an oversized frame: the next call goes through it.
    expect(page.locator("#connection-status")).to_have_text("Connected to the portal.")
    pick_tool(page, re.compile(r"^Echo "))
    page.get_by_label("Message").fill("still connected")
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    assert page.problems == []


def test_a_person_answers_a_sampling_request(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, re.compile(r"^Summarize \(sampling\) "))
    page.get_by_label("Text").fill("Elicitation lets a tool ask the user.")
    page.get_by_role("button", name="Call tool").click()
    asked = page.get_by_role("form", name="The server asks for a model's reply")
    expect(asked).to_be_visible()
    expect(asked.locator("#sampling-messages")).to_contain_text("Summarize in one line: Elicitation lets a tool")
    expect(asked.locator("#sampling-system")).to_have_text("System prompt: You write one-line summaries.")
    asked.get_by_role("button", name="Approve and send").click()
    expect(asked.locator("#sampling-error")).to_have_text("Write the reply first (or decline).")
    asked.get_by_label("Your reply").fill("Tools can ask back.")
    page.screenshot(path=str(SCREENSHOTS / "sampling.png"), full_page=True)
    asked.get_by_role("button", name="Approve and send").click()
    expect(asked).to_be_hidden()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result")).to_contain_text("human says: Tools can ask back.")
    assert page.problems == []


def test_a_url_elicitation_opens_the_page_only_on_consent(page: Page, alice, demo_server):
    demo_server.protocol = "legacy"  # the SDK's server can ask for a URL mid-call only in the handshake era
    demo_server.save()
    # The demo's page is "visited" without the network: the browser gets a stand-in.
    page.context.route("https://example.org/**", lambda route: route.fulfill(body="<title>Consent</title>ok"))
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, re.compile(r"^Connect an account \(URL elicitation\) "))
    page.get_by_role("button", name="Call tool").click()
    asked = page.get_by_role("form", name="Sign in to the demo service to connect your account.")
    expect(asked).to_contain_text("https://example.org/consent")
    expect(asked.locator(".url-elicitation strong")).to_have_text("example.org")
    assert len(page.context.pages) == 1  # shown, not opened
    page.screenshot(path=str(SCREENSHOTS / "url-elicitation.png"), full_page=True)
    with page.context.expect_page() as opened:
        asked.get_by_role("button", name="Open the page").click()
    assert opened.value.url == "https://example.org/consent"
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result")).to_contain_text("account connected")
    assert page.problems == []


def test_a_resource_link_in_a_result_is_read_on_click(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, re.compile(r"^Link a resource "))
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    link = page.locator("#result .resource-link")
    expect(link).to_contain_text("demo://readme (Read me) · text/plain")
    link.get_by_role("button", name="Read it").click()
    expect(link.locator(".resource-contents pre")).to_contain_text("This is the portal's demo server.")
    assert page.problems == []
