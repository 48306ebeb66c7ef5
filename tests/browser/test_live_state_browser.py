"""Every page of a person follows their calls, in real Chromium: one intent is one call (a double
Ctrl+Enter), a reload keeps the running call and its open form, a second tab shows a call the first
started and answers its form for both, and History cancels a running call."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from sessions.models import ToolCall
from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.browser.test_playground_browser import call_status, open_playground

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


def pick(page: Page, tool: str) -> None:
    """By the tool's name: some titles ("Ask for a contact") begin others'."""
    page.locator(f'#tool-list button[data-tool="{tool}"]').click()
    expect(page.locator("#tool-full-name")).to_have_text(f"mcp__demo__{tool}")


def contact_form(page: Page):
    return page.get_by_role("form", name="Who should we contact about the launch?")


def test_a_double_ctrl_enter_makes_one_call(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick(page, "sleep")
    page.get_by_label("Seconds").fill("1")
    page.get_by_label("Seconds").press("Control+Enter")
    page.get_by_label("Seconds").press("Control+Enter")
    expect(call_status(page)).to_contain_text("Succeeded")
    assert ToolCall.objects.filter(tool="sleep").count() == 1
    # Once it ended, the same keys start the next call.
    page.get_by_label("Seconds").press("Control+Enter")
    expect(call_status(page)).to_contain_text("Running")
    expect(call_status(page)).to_contain_text("Succeeded")
    assert ToolCall.objects.filter(tool="sleep").count() == 2
    assert page.problems == []


def test_a_reload_during_a_call_shows_it_and_its_end(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick(page, "sleep")
    page.get_by_label("Seconds").fill("3")
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Running")
    page.reload()
    expect(call_status(page)).to_contain_text("Running sleep")
    expect(page.get_by_role("button", name="Cancel call")).to_be_visible()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result .text-block")).to_contain_text("slept 3")
    assert page.problems == []


def test_a_reload_with_a_form_open_shows_it_again_and_answering_completes_the_call(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick(page, "ask")
    page.get_by_label("Topic").fill("the launch")
    page.get_by_role("button", name="Call tool").click()
    expect(contact_form(page)).to_be_visible()
    page.reload()
    form = contact_form(page)
    expect(form).to_be_visible()
    form.get_by_label("Name").fill("Ann")
    form.get_by_label("Email").fill("ann@example.org")
    form.get_by_role("button", name="Accept").click()
    expect(form).to_be_hidden()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result .text-block")).to_have_text("will contact Ann <ann@example.org> about the launch")
    assert page.problems == []


def test_a_second_tab_shows_the_call_and_its_answer_closes_the_form_in_both(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    watching = page.context.new_page()  # the same person, in a second tab
    watching.goto(f"/playground/?server={demo_server.pk}")
    expect(watching.locator("#connection-status")).to_have_text("Connected to the portal.")

    pick(page, "ask")
    page.get_by_label("Topic").fill("the launch")
    page.get_by_role("button", name="Call tool").click()
    expect(contact_form(page)).to_be_visible()
    form = contact_form(watching)
    expect(form).to_be_visible()
    watching.screenshot(path=str(SCREENSHOTS / "second-tab.png"), full_page=True)
    form.get_by_label("Name").fill("Bo")
    form.get_by_label("Email").fill("bo@example.org")
    form.get_by_role("button", name="Accept").click()
    expect(form).to_be_hidden()
    expect(contact_form(page)).to_be_hidden()
    for tab in (page, watching):
        expect(call_status(tab)).to_contain_text("Succeeded")
        expect(tab.locator("#result .text-block")).to_have_text("will contact Bo <bo@example.org> about the launch")
    assert ToolCall.objects.filter(tool="ask").count() == 1
    assert page.problems == []


def test_history_cancels_a_running_call(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick(page, "sleep")
    page.get_by_label("Seconds").fill("60")
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Running")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="History").click()
    row = page.get_by_role("row").filter(has_text="sleep")
    expect(row).to_contain_text("Running")
    row.get_by_role("button", name="Cancel").click()
    expect(row).to_contain_text("Cancelled")
    expect(row.get_by_role("button", name="Cancel")).to_have_count(0)
    assert ToolCall.objects.get(tool="sleep").status == "cancelled"
    # Back in the playground, nothing is left running.
    page.go_back()
    expect(page.locator("#running-calls")).to_be_hidden()
    assert page.problems == []


def test_the_server_page_follows_test_connection(page: Page, alice, demo_server):
    # Straight to the server's page: the playground (the home page) would connect to it first.
    log_in(page, "alice", "pw-alice", next=f"/servers/{demo_server.pk}/")
    tools = page.get_by_role("heading", name=re.compile(r"^Tools \(\d+\)$"))
    expect(tools).to_have_text("Tools (0)")
    expect(page.locator(f'h1 [data-connection="{demo_server.pk}"]')).to_have_text("not connected")
    page.get_by_role("button", name="Test connection").click()
    expect(page.locator("#test-result")).to_contain_text("portal-demo")
    # Without a reload: the tools the test found, and the connection they were listed on.
    expect(tools).not_to_have_text("Tools (0)")
    expect(page.get_by_role("link", name="Echo")).to_be_visible()
    expect(page.locator(f'h1 [data-connection="{demo_server.pk}"]')).to_have_text("connected")
    assert page.problems == []


def test_the_server_page_shows_what_the_server_logs_outside_any_call(page: Page, alice, fault_server):
    log_in(page, "alice", "pw-alice")
    page.goto(f"/servers/{fault_server.pk}/")
    lines = page.get_by_role("list", name="Server log lines")
    expect(page.get_by_text("Nothing logged yet.")).to_be_visible()
    playground = page.context.new_page()
    playground.goto(f"/playground/?server={fault_server.pk}&tool=log_after")
    playground.get_by_label("Text").fill("roots updated")
    playground.get_by_role("button", name="Call tool").click()
    expect(call_status(playground)).to_contain_text("Succeeded")
    # Live on the server's page; not in the call's log, which it does not belong to.
    expect(lines).to_contain_text("roots updated")
    expect(lines).to_contain_text("between")
    expect(playground.locator("#log-lines")).not_to_contain_text("roots updated")
    page.reload()  # kept: the last lines of the connection
    expect(lines).to_contain_text("roots updated")
    assert page.problems == []
