"""The approval dialog in real Chromium: a call that needs asking waits for the person, survives a
reload, and runs only when allowed; Deny ends it rejected."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from sessions.models import ToolCall
from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.browser.test_playground_browser import call_status, open_playground, pick_tool

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


def test_it_asks_before_a_tool_that_writes_and_runs_it_once_allowed(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, "Write a note")
    page.get_by_label("Text").fill("remember the milk")
    page.get_by_role("button", name="Call tool").click()

    dialog = page.get_by_role("dialog", name="Allow this tool call?")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#approval-tool")).to_have_text("write_note")
    expect(dialog.locator("#approval-arguments")).to_contain_text("remember the milk")
    expect(dialog.locator("#approval-annotations")).to_have_text("readOnlyHint: false, destructiveHint: false")
    page.screenshot(path=str(SCREENSHOTS / "approval.png"))

    # A reload does not lose the waiting approval: the page asks for it again on connect.
    page.reload()
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Allow once").click()
    expect(dialog).to_be_hidden()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result")).to_contain_text(": remember the milk")
    call = ToolCall.objects.get(tool="write_note")
    assert call.status == "succeeded"


def test_deny_ends_the_call_rejected(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, "Write a note")
    page.get_by_label("Text").fill("never mind")
    page.get_by_role("button", name="Call tool").click()
    dialog = page.get_by_role("dialog", name="Allow this tool call?")
    dialog.get_by_role("button", name="Deny").click()
    expect(call_status(page)).to_contain_text("Rejected")
    assert ToolCall.objects.get(tool="write_note").status == "rejected"
