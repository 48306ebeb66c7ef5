"""Details of the pages a newcomer meets, in real Chromium: a tool's error read as an error, a number
JSON cannot carry named as such, "Always allow" changing the tool's badge, a tool that runs as an MCP
task marked, stdio arguments as a list, the password page and the servers table at 1400 px."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect

from servers.models import Server
from tests.browser.conftest import TIMEOUT_MS, log_in
from tests.browser.test_playground_browser import call_status, open_playground, pick_tool
from tests.conftest import EVERYTHING, EVERYTHING_MISSING

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


def test_a_tool_error_is_read_as_an_error_not_folded_as_a_read_only_result(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, re.compile(r"^Fail "))
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("tool error")
    expect(page.locator("#result")).to_contain_text("it failed on purpose")
    expect(page.locator("#result")).not_to_contain_text("Read-only result")
    # The socket's state names the portal, beside the server's own state.
    expect(page.locator("#connection-status")).to_have_text("Connected to the portal.")
    assert page.problems == []


def test_a_number_too_large_for_json_is_named_not_sent_as_none(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, "Add two numbers")
    page.get_by_label("Edit as JSON").check()
    page.get_by_label("Arguments (JSON)").fill('{"a": 1e400, "b": 1}')
    page.get_by_role("button", name="Call tool").click()
    expect(page.locator("#form-error")).to_contain_text("Not a finite number")
    page.get_by_label("Edit as JSON").uncheck()
    page.get_by_role("spinbutton", name="A", exact=True).fill("1e400")
    page.get_by_role("spinbutton", name="B", exact=True).fill("1")
    page.get_by_role("button", name="Call tool").click()
    # Chromium's number field itself refuses 1e400, or the form does: either way, beside the field.
    field_a = page.locator(".field").filter(has=page.get_by_role("spinbutton", name="A", exact=True))
    expect(field_a.get_by_role("alert")).to_have_text(re.compile("not a (finite )?number", re.I))
    expect(call_status(page)).not_to_contain_text("None is not")
    assert page.problems == []


def test_always_allow_changes_the_tools_badge_at_once(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, "Write a note")
    decision = page.locator("#tool-decision")
    expect(decision).to_contain_text("asks you first")
    page.get_by_label("Text").fill("remember the eggs")
    page.get_by_role("button", name="Call tool").click()
    dialog = page.get_by_role("dialog", name="Allow this tool call?")
    dialog.get_by_role("button", name="Always allow").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(decision).not_to_contain_text("asks you first")
    expect(decision).to_contain_text(re.compile("allow", re.I))
    assert page.problems == []


def test_a_stdio_servers_arguments_are_a_list_and_its_instructions_keep_their_lines(page: Page, alice, demo_server):
    demo_server.last_test = {
        "ok": True,
        "server_name": "portal-demo",
        "instructions": "First paragraph.\n\n- one\n- two <b>never bold</b>",
        "capabilities": {},
    }
    demo_server.save()
    log_in(page, "alice", "pw-alice")
    page.goto(f"/servers/{demo_server.pk}/")
    items = page.locator("#server-args li")
    expect(items).to_have_count(len(demo_server.args))
    expect(items.first).to_have_text(demo_server.args[0])
    instructions = page.locator(".instructions")
    expect(instructions).to_have_css("white-space", "pre-wrap")
    assert "\n\n- one\n- two <b>never bold</b>" in instructions.inner_text()
    assert page.locator(".instructions b").count() == 0


def test_the_password_page_and_the_servers_table_at_1400_px(page: Page, alice, demo_server):
    Server.objects.create(
        team=demo_server.team,
        name="a-server-with-a-very-long-name-that-goes-on-and-on-and-on-and-on",
        transport="http",
        url="https://mcp.example.com/" + "very/long/path/" * 8,
    )
    page.set_viewport_size({"width": 1400, "height": 900})
    log_in(page, "alice", "pw-alice")
    page.goto("/accounts/password/change/")
    expect(page.get_by_role("navigation", name="Main")).to_be_visible()
    expect(page.locator(".card h1")).to_have_text("Change password")
    page.goto("/servers/")
    expect(page.get_by_role("link", name=re.compile("a-server-with-a-very-long-name"))).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1400, f"the servers table overflows the page: {width} px"
    assert page.problems == []


@pytest.mark.skipif(not EVERYTHING.exists(), reason=EVERYTHING_MISSING)
def test_a_tool_that_runs_as_a_task_is_marked_in_the_list_its_pane_and_the_server_page(page: Page, alice, everything):
    log_in(page, "alice", "pw-alice")
    open_playground(page, everything)
    tools = page.get_by_role("list", name="Tools")
    research = tools.locator('button[data-tool="simulate-research-query"]')
    expect(research).to_contain_text("runs as a task")
    expect(tools.locator('button[data-tool="echo"]')).not_to_contain_text("as a task")
    expect(tools).not_to_contain_text("needs tasks")
    research.click()
    expect(page.locator("#tool-badges")).to_contain_text("runs as a task")
    # "required": the server decides, so there is nothing to choose ("Run as task" is for "optional").
    expect(page.get_by_label("Run as task")).to_be_hidden()
    page.locator('#tool-list button[data-tool="echo"]').click()
    expect(page.locator("#tool-badges")).not_to_contain_text("as a task")
    expect(page.get_by_label("Run as task")).to_be_hidden()

    # The server's page renders from the list the playground just had listed and saved.
    page.goto(f"/servers/{everything.pk}/")
    expect(page.locator("#tool-simulate-research-query")).to_contain_text("runs as a task")
    expect(page.locator("#tool-echo")).not_to_contain_text("as a task")
    expect(page.locator("#tool-list")).not_to_contain_text("needs tasks")
    assert page.problems == []
