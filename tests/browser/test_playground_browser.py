"""The playground in real Chromium: register the demo server, call its tools, read the results.

Everything goes through the page as a person would use it (labels, roles, visible text)
against the real portal process and a real worker; see conftest.py for the wiring.
"""

from __future__ import annotations

import re
import sys

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.conftest import ROOT

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)

XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


def open_playground(page: Page, server) -> None:
    page.goto(f"/playground/?server={server.pk}")
    # The socket is up and the worker has listed the tools (the ORM-made server has none cached).
    expect(page.locator("#connection-status")).to_have_text("Connected to the portal.")
    expect(page.locator("#tools-status")).to_have_text(re.compile(r"^\d+ tools$"))


def pick_tool(page: Page, title: str | re.Pattern[str]) -> None:
    """By its title; a pattern (r"^Sleep ") tells apart a title that other tools' descriptions mention."""
    page.get_by_role("list", name="Tools").get_by_role("button", name=title).click()
    heading = re.compile(title.pattern.rstrip(" ") + "$") if isinstance(title, re.Pattern) else title
    expect(page.get_by_role("heading", level=1)).to_have_text(heading)


def call_status(page: Page):
    return page.locator("#call-status")


def test_it_registers_the_demo_server_and_calls_echo(page: Page, alice):
    log_in(page, "alice", "pw-alice")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Servers").click()
    page.get_by_role("link", name="Add a server").click()

    page.get_by_label("Name", exact=True).fill("demo")
    page.get_by_label("stdio (a local command)").check()
    # Choosing stdio hides the HTTP fields (server-form.js).
    expect(page.get_by_label("URL", exact=True)).to_be_hidden()
    page.get_by_label("Command", exact=True).fill(sys.executable)
    page.get_by_label("Arguments", exact=True).fill("-m\nsessions.mcp.demo_server")
    page.get_by_label("Working directory").fill(str(ROOT))
    page.get_by_role("button", name="Register server").click()

    expect(page.get_by_role("heading", level=1)).to_contain_text("demo")
    expect(page.get_by_role("status").filter(has_text="Registered demo.")).to_be_visible()
    detail_url = page.url
    expect(page.get_by_text("Not tested yet.")).to_be_visible()

    page.get_by_role("button", name="Test connection").click()
    result = page.locator("#test-result")
    expect(result).to_contain_text("connected")
    expect(result).to_contain_text("portal-demo")
    expect(page.get_by_role("button", name="Test connection")).to_be_enabled()

    page.get_by_role("link", name="Open in playground").click()
    expect(page).to_have_url(re.compile(r"/playground/\?server=\d+$"))
    pick_tool(page, "Echo")
    expect(page).to_have_url(re.compile(r"tool=echo"))
    page.get_by_label("Message").fill("hello from Chromium")
    page.get_by_role("button", name="Call tool").click()

    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result .text-block")).to_have_text("hello from Chromium")
    expect(page.get_by_role("button", name="Call tool")).to_be_enabled()
    page.screenshot(path=str(SCREENSHOTS / "playground.png"), full_page=True)

    # Back on the detail page, the server-rendered view now has the test result and the tools.
    page.goto(detail_url)
    expect(page.locator("#test-result")).to_contain_text("portal-demo")
    expect(page.get_by_role("heading", name=re.compile(r"^Tools \(\d+\)$"))).not_to_have_text("Tools (0)")
    page.screenshot(path=str(SCREENSHOTS / "server-detail.png"), full_page=True)
    assert page.problems == []


def test_it_shows_progress_and_an_image(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)

    pick_tool(page, "Count with progress")
    page.get_by_label("Steps").fill("3")
    # Progress is brief; rather than race to see the bar, the page records what it showed at
    # each progress message (the text, whether the bar was on screen, and its value).
    page.evaluate(
        """() => {
          const message = document.getElementById("progress-message");
          const bar = document.getElementById("call-progress");
          window.__seen = [];
          new MutationObserver(() => window.__seen.push([message.textContent, !bar.hidden, bar.value, bar.max]))
            .observe(message, { childList: true, characterData: true, subtree: true });
        }"""
    )
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result .text-block")).to_have_text("counted to 3")
    seen = [entry for entry in page.evaluate("window.__seen") if entry[0]]
    assert seen == [[f"step {n} of 3", True, n, 3] for n in (1, 2, 3)]
    # Once the call ends the bar goes away and the last message stays.
    expect(page.get_by_role("progressbar", name="Progress")).to_be_hidden()
    expect(page.locator("#progress-message")).to_have_text("step 3 of 3")

    pick_tool(page, "Draw a square")
    page.get_by_label("Colour").select_option(label="red")
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result")).to_contain_text("a 64x64 red square")
    image = page.get_by_role("img", name="Image returned by the tool")
    expect(image).to_be_visible()
    expect(image).to_have_attribute("src", re.compile(r"^data:image/png;base64,iVBORw0KGgo"))
    # Decoded for real: the CSP lets data: images through and the PNG is valid.
    assert image.evaluate("img => img.complete && img.naturalWidth") == 64
    assert page.problems == []


def test_it_shows_schema_errors_beside_fields(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, "Add two numbers")

    # JSON mode bypasses the form, so the worker's schema check is what answers.
    page.get_by_label("Edit as JSON").check()
    page.get_by_label("Arguments (JSON)").fill('{"a": "two"}')
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Rejected")
    expect(page.get_by_text("'b' is a required property")).to_be_visible()
    expect(page.get_by_text("'two' is not of type 'number'")).to_be_visible()

    # Back in the form: the error lands beside field B, which was left empty.
    page.get_by_label("Edit as JSON").uncheck()
    page.get_by_role("spinbutton", name="A", exact=True).fill("2")
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Rejected")
    field_b = page.locator(".field").filter(has=page.get_by_role("spinbutton", name="B", exact=True))
    expect(field_b.get_by_role("alert")).to_have_text("'b' is a required property")
    expect(page.get_by_role("spinbutton", name="B", exact=True)).to_have_attribute("aria-invalid", "true")
    field_a = page.locator(".field").filter(has=page.get_by_role("spinbutton", name="A", exact=True))
    expect(field_a.locator(".error")).to_be_empty()

    # Filling B fixes it, and the error goes away.
    page.get_by_role("spinbutton", name="B", exact=True).fill("3.5")
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result")).to_contain_text('"sum": 5.5')
    expect(field_b.locator(".error")).to_be_empty()
    assert page.problems == []


def test_it_shows_each_missing_field_error_beside_its_own_field(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, "Add two numbers")

    # Both required fields empty: one message each, each beside its own field (once, every
    # `required` error pointed at the first missing field, so B's message replaced A's).
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Rejected")
    for name in ("A", "B"):
        field = page.locator(".field").filter(has=page.get_by_role("spinbutton", name=name, exact=True))
        expect(field.locator(".error")).to_have_text(f"'{name.lower()}' is a required property")
        expect(field.get_by_role("spinbutton")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#form-error")).to_be_empty()
    assert page.problems == []


def test_tool_output_is_inert(page: Page, alice, demo_server):
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, "Echo")

    page.get_by_label("Message").fill(XSS)
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    # The markup comes back as text, not as elements.
    expect(page.locator("#result .text-block")).to_have_text(XSS)
    expect(page.locator("#result img, #result script")).to_have_count(0)
    assert page.evaluate("window.__xss") is None
    assert dialogs == []

    # The history pages show the same arguments and result through Django's templates.
    page.get_by_role("navigation", name="Main").get_by_role("link", name="History").click()
    page.get_by_role("table").get_by_role("link").first.click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("echo")
    blocks = page.locator("main pre").filter(has_text="<script>window.__xss=2</script>")
    # The arguments, the result's text and its structured content, and the JSON-RPC request and
    # answer as they passed.
    expect(blocks).to_have_count(5)
    expect(page.locator("main pre img, main pre script")).to_have_count(0)
    assert page.evaluate("window.__xss") is None
    assert dialogs == []


def test_tool_descriptions_and_server_names_are_inert(page: Page, alice, demo_server):
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    # A tool's description is the MCP server's to write (the demo takes write_note's from its
    # environment). A server's name is the admin's: the form allows letters, digits, _ and - only,
    # so this one goes straight into the database, past that first defence.
    name = '<img src=x onerror="window.__xss=3">'
    demo_server.env = {"DEMO_NOTE_DESCRIPTION": XSS}
    demo_server.name = name
    demo_server.save()
    # What the payloads would plant, if they became markup (pages pass data in application/json scripts).
    planted = page.locator('img[src="x"], script:not([src]):not([type="application/json"])')

    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    tools = page.get_by_role("list", name="Tools")
    expect(tools).to_contain_text(XSS)  # the summary in the list, as text
    pick_tool(page, "Write a note")
    expect(page.locator("#tool-description")).to_have_text(XSS)
    page.get_by_label("Text").fill("x")
    page.get_by_role("button", name="Call tool").click()
    dialog = page.get_by_role("dialog", name="Allow this tool call?")
    expect(dialog.locator("#approval-description")).to_have_text(XSS)  # the approval dialog shows it too
    dialog.get_by_role("button", name="Allow once").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(planted).to_have_count(0)
    assert page.evaluate("window.__xss") is None

    # The server's name, on every page that shows it.
    for path in ("/servers/", f"/servers/{demo_server.pk}/", "/calls/", "/credentials/"):
        page.goto(path)
        expect(page.locator("main")).to_contain_text(name)
        expect(planted).to_have_count(0)
        assert page.evaluate("window.__xss") is None, path
    assert dialogs == []


def test_it_calls_a_tool_from_the_keyboard(page: Page, alice, demo_server):
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)

    # Filter the tools, Tab to the only match and pick it with Enter.
    page.get_by_label("Filter tools").fill("echo")
    echo = page.get_by_role("list", name="Tools").get_by_role("button")
    expect(echo).to_have_count(1)
    page.keyboard.press("Tab")
    expect(echo).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("Echo")
    # Picking re-renders the list; focus stays on the picked tool, so Tab walks on into the form.
    expect(echo).to_be_focused()
    expect(echo).to_have_attribute("aria-current", "true")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Edit as JSON")).to_be_focused()
    page.keyboard.press("Tab")
    expect(page.get_by_label("Message")).to_be_focused()

    page.keyboard.type("sent with ctrl+enter")
    page.keyboard.press("Control+Enter")
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#result .text-block")).to_have_text("sent with ctrl+enter")
    assert page.problems == []


def hold_tool_lists(page: Page):
    """Route the page's socket so its `list_tools` messages wait until released: the live list then
    arrives after the person has typed, deterministically. Returns release() and hold(), which starts holding again."""
    held: list[tuple[object, str | bytes]] = []
    released = False

    def handler(ws) -> None:
        server = ws.connect_to_server()

        def from_page(message: str | bytes) -> None:
            # Playwright hands the page's messages over while the test is inside one of its calls:
            # a list sent before release() may reach here after it, and then goes on at once.
            if '"list_tools"' in str(message) and not released:
                held.append((server, message))
            else:
                server.send(message)

        ws.on_message(from_page)

    page.route_web_socket(re.compile(r"/ws/playground/$"), handler)

    def release() -> None:
        nonlocal released
        released = True
        for server, message in held:
            server.send(message)
        held.clear()

    def hold() -> None:
        nonlocal released
        released = False

    return release, hold


def reversed_keys(value):
    if isinstance(value, dict):
        return {key: reversed_keys(value[key]) for key in reversed(list(value))}
    return [reversed_keys(item) for item in value] if isinstance(value, list) else value


def test_the_live_tool_list_keeps_what_was_typed(page: Page, alice, demo_server):
    """The page opens on the stored list and the worker's live one follows. The same definitions with
    their keys in another order (PostgreSQL's jsonb keeps them so) leave the form alone; a changed
    definition gets a new form that keeps what was typed."""
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)  # the worker stores the live list
    demo_server.refresh_from_db()
    stored = reversed_keys(demo_server.tools)
    demo_server.tools = stored
    demo_server.save(update_fields=["tools"])
    release, hold = hold_tool_lists(page)

    page.goto(f"/playground/?server={demo_server.pk}&tool=echo")
    message = page.get_by_label("Message")
    message.fill("typed before the list came")
    release()
    expect(page.locator("#tools-status")).to_have_text(re.compile(r"^\d+ tools$"))
    page.wait_for_timeout(300)  # any re-render follows the status in the same event
    expect(message).to_have_value("typed before the list came")

    # A changed definition: the stored description is older than the server's.
    demo_server.tools = [
        {**tool, "description": "An older description."} if tool["name"] == "echo" else tool for tool in stored
    ]
    demo_server.save(update_fields=["tools"])
    hold()
    page.goto(f"/playground/?server={demo_server.pk}&tool=echo")
    expect(page.locator("#tool-description")).to_have_text("An older description.")
    page.get_by_label("Message").fill("still here")
    release()
    expect(page.locator("#tool-description")).to_have_text("Echo back the given message.")
    expect(page.get_by_label("Message")).to_have_value("still here")
    assert page.problems == []
