"""The approvals inbox in real Chromium, against the live portal and its worker: a call that asks
appears without a reload, the navigation counts it on every open page, and an answer from the inbox
runs (or ends) the call.

Calls are started in another tab over the portal's socket (as the playground starts them), so the
portal's own worker decides, asks and runs them against the real demo server.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from playwright.sync_api import Page, expect

from sessions.actions import Came, do_start_tool_call
from sessions.models import Approval, ToolCall, Via
from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.browser.test_playground_browser import call_status, open_playground, pick_tool
from tests.test_approvals_inbox import WRITE_NOTE, changed_since_always_allowed

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)

# A second socket of the person's, in another tab: it starts a call and keeps the tab's page alive.
START_CALL = """([server, tool, args]) => new Promise((resolve, reject) => {
  const ws = new WebSocket(`ws://${location.host}/ws/playground/`);
  ws.onopen = () => ws.send(JSON.stringify({type: "call", ref: "t", server, tool, arguments: args}));
  ws.onmessage = (e) => { const m = JSON.parse(e.data); if (m.ref === "t") resolve(m); };
  ws.onerror = () => reject(new Error("socket failed"));
  window._callSocket = ws;
})"""


class Inbox:
    """The inbox page as a person uses it: its cards, the nav's count, the answer buttons."""

    def __init__(self, page: Page):
        self.page = page

    def open(self) -> Inbox:
        self.page.get_by_role("navigation", name="Main").get_by_role("link", name="Approvals").click()
        expect(self.page.get_by_role("heading", level=1)).to_have_text("Calls waiting for your approval")
        return self

    @property
    def cards(self):
        return self.page.locator("article.approval-card")

    def card(self, text: str):
        return self.cards.filter(has_text=text)

    def answer(self, text: str, button: str) -> None:
        self.card(text).get_by_role("button", name=button, exact=True).click()


def count(page: Page):
    return page.locator("#approvals-count")


def start_call_elsewhere(page: Page, server, text: str) -> dict:
    """From another tab of the same browser (the person's session), as the playground would."""
    other = page.context.new_page()
    other.goto("/calls/")
    accepted = other.evaluate(START_CALL, [server.pk, "write_note", {"text": text}])
    assert accepted["type"] == "call.accepted", accepted
    return {"page": other, "call": accepted["call"]}


def agent_call(user, server, arguments: dict) -> ToolCall:
    try:
        came = Came(via=Via.MCP, client="claude-code 2.1.0")
        return do_start_tool_call(user, server.pk, "write_note", arguments, came=came)
    finally:
        connection.close()


def in_a_thread(function, *args):
    """Off Playwright's thread, whose running event loop refuses the action's on-commit publish."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(function, *args).result()


def wait_for_status(call_id: str, status: str, timeout: float = TIMEOUT_MS / 1000) -> ToolCall:
    deadline = time.monotonic() + timeout
    while True:
        call = ToolCall.objects.get(pk=call_id)
        if call.status == status or time.monotonic() > deadline:
            return call
        time.sleep(0.1)


def test_a_call_that_asks_appears_live_and_allow_once_runs_it(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice", next="/calls/")
    inbox = Inbox(page).open()
    expect(page.get_by_text("Nothing waits for your approval.")).to_be_visible()
    expect(count(page)).to_be_hidden()

    started = start_call_elsewhere(page, demo_server, "<b>remember</b> the milk")

    # No reload: the worker asked, the event reached this page's socket.
    card = inbox.card("remember")
    expect(card).to_be_visible()
    expect(card.locator("h2")).to_contain_text("Playground asks to run demo · write_note")
    expect(card.locator(".arguments")).to_have_text(json.dumps({"text": "<b>remember</b> the milk"}, indent=2))
    expect(card.locator(".annotations")).to_have_text("readOnlyHint: false, destructiveHint: false")
    expect(card.locator(".reason")).to_contain_text("not read-only, not destructive")
    expect(card.locator(".expires")).to_contain_text("s, then the call ends as timed out")
    expect(card.get_by_role("button", name="Always allow")).to_be_visible()
    expect(page.get_by_text("Nothing waits for your approval.")).to_be_hidden()
    # The count, here and on the other open page.
    expect(count(page)).to_be_visible()
    expect(count(page)).to_have_text("1 waiting")
    expect(count(started["page"])).to_have_text("1 waiting")

    inbox.answer("remember", "Allow once")
    expect(inbox.cards).to_have_count(0)
    expect(count(page)).to_be_hidden()
    expect(count(started["page"])).to_be_hidden()
    call = wait_for_status(started["call"], "succeeded")
    assert call.status == "succeeded", (call.status, call.error)
    assert call.result["content"][0]["text"].endswith(": <b>remember</b> the milk")
    assert Approval.objects.get(call=call).state == "approved"
    assert page.problems == []


def test_an_agents_call_shows_its_client_and_what_changed(page: Page, alice, demo_server):
    # An agent's call through the MCP endpoint, recorded as the endpoint records it (this process's
    # events do not reach the portal's pages, so the page finds it when it loads and asks).
    demo_server.tools = [WRITE_NOTE]
    changed_since_always_allowed(alice, demo_server)
    asked = in_a_thread(agent_call, alice, demo_server, {"text": "standup notes"})
    assert asked.status == "awaiting_approval", (asked.status, asked.error)
    log_in(page, "alice", "pw-alice", next="/approvals/")
    inbox = Inbox(page)
    card = inbox.card("standup notes")
    expect(card.locator("h2")).to_contain_text("claude-code 2.1.0 asks to run demo · write_note")
    expect(card.locator("table.diff tr.diff-added")).to_contain_text("mail it to everyone you know")
    expect(count(page)).to_have_text("1 waiting")
    # And one from the playground, live, beside it.
    start_call_elsewhere(page, demo_server, "<b>remember</b> the milk")
    expect(inbox.card("remember")).to_be_visible()
    expect(count(page)).to_have_text("2 waiting")
    page.bring_to_front()
    page.screenshot(path=str(SCREENSHOTS / "approvals-inbox.png"), full_page=True)
    assert page.problems == []


def test_on_the_playground_the_count_and_the_dialog_agree(page: Page, alice, demo_server):
    # The playground keeps its own socket; the count listens on a second one.
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, "Write a note")
    page.get_by_label("Text").fill("from the playground")
    page.get_by_role("button", name="Call tool").click()
    dialog = page.get_by_role("dialog", name="Allow this tool call?")
    expect(dialog).to_be_visible()
    expect(count(page)).to_have_text("1 waiting")
    dialog.get_by_role("button", name="Allow once").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(count(page)).to_be_hidden()
    assert page.problems == []


def test_allow_all_once_answers_every_waiting_call_of_the_tool_and_deny_ends_one(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice", next="/approvals/")
    inbox = Inbox(page)
    calls = [start_call_elsewhere(page, demo_server, f"note {n}")["call"] for n in (1, 2, 3)]
    expect(inbox.cards).to_have_count(3)
    expect(count(page)).to_have_text("3 waiting")
    page.bring_to_front()  # the other tabs took the front

    # By keyboard: the answered card goes, and focus moves to a remaining one's first button.
    inbox.card("note 3").get_by_role("button", name="Deny").press("Enter")
    expect(inbox.cards).to_have_count(2)
    expect(page.locator("article.approval-card button:focus")).to_have_text("Allow once")
    assert wait_for_status(calls[2], "rejected").status == "rejected"

    page.get_by_role("button", name="Allow all 2 once").click()
    expect(inbox.cards).to_have_count(0)
    expect(count(page)).to_be_hidden()
    for call_id in calls[:2]:
        assert wait_for_status(call_id, "succeeded").status == "succeeded"
    assert page.problems == []


def test_the_inbox_without_javascript_answers_by_its_forms(browser, live_portal, alice, demo_server):
    context = browser.new_context(base_url=live_portal["url"], java_script_enabled=False)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    try:
        log_in(page, "alice", "pw-alice", next="/approvals/")
        # The call comes from a page that runs JavaScript; this one only reads and posts.
        helper = browser.new_context(base_url=live_portal["url"])
        helper_page = helper.new_page()
        log_in(helper_page, "alice", "pw-alice", next="/calls/")
        started = start_call_elsewhere(helper_page, demo_server, "by form")
        deadline = time.monotonic() + TIMEOUT_MS / 1000
        while not Approval.objects.filter(call_id=started["call"]).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        page.reload()
        expect(count(page)).to_have_text("1 waiting")
        Inbox(page).answer("by form", "Allow once")
        expect(page.get_by_role("status").filter(has_text="Allowed once: demo · write_note.")).to_be_visible()
        expect(count(page)).to_be_hidden()
        assert wait_for_status(started["call"], "succeeded").status == "succeeded"
        helper.close()
    finally:
        context.close()


# Headless Chromium shows no notifications one could see: the browser's own constructor is wrapped to
# record them, and the page made to read as hidden (a tab in the background).
RECORD_NOTIFICATIONS = """
Object.defineProperty(Document.prototype, "hidden", { get: () => window._hidden ?? false });
window._notifications = [];
window._shown = [];
const Real = window.Notification;
window.Notification = class extends Real {
  constructor(title, options) {
    super(title, options);
    window._notifications.push({ title, ...options });
    window._shown.push(this);
  }
};
"""


def test_notify_me_shows_a_notification_for_a_new_approval_while_the_page_is_hidden(
    browser, live_portal, alice, demo_server
):
    context = browser.new_context(base_url=live_portal["url"])
    context.set_default_timeout(TIMEOUT_MS)
    context.grant_permissions(["notifications"])
    context.add_init_script(RECORD_NOTIFICATIONS)
    page = context.new_page()
    try:
        log_in(page, "alice", "pw-alice", next="/approvals/")
        page.get_by_role("button", name="Notify me in this browser").click()
        expect(page.locator("#notify-status")).to_contain_text("notifies you of new approvals")
        assert page.evaluate("localStorage.getItem('portal.notify-approvals')") == "on"

        # A visible page shows the card, no notification.
        start_call_elsewhere(page, demo_server, "seen")
        expect(Inbox(page).cards).to_have_count(1)
        assert page.evaluate("window._notifications.length") == 0
        # Another page of the portal, in the background.
        page.goto("/calls/")
        expect(page.get_by_role("button", name="Notify me in this browser")).to_have_count(0)
        page.evaluate("window._hidden = true")
        start_call_elsewhere(page, demo_server, "unseen")
        page.wait_for_function("window._notifications.length > 0")
        shown = page.evaluate("window._notifications")
        assert [n["title"] for n in shown] == ["Playground asks to run demo · write_note"], shown
        assert shown[0]["tag"].startswith("approval:")
        # Clicking it opens the inbox.
        page.evaluate("window._shown[0].dispatchEvent(new Event('click'))")
        expect(page).to_have_url(f"{live_portal['url']}/approvals/")
        expect(Inbox(page).cards).to_have_count(2)
    finally:
        context.close()
