"""MCP Apps in real Chromium: the demo's chart app renders beside its result from the apps origin, its
tool calls are decided like the person's (an ask rule shows the approval dialog naming the app; Deny
refuses it and the app hears why; Allow runs it), History and the audit log say `via: app`, and a
script in the app cannot reach the portal's cookies or page, nor open a `javascript:` link."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Frame, Page, expect

from servers.models import Effect, PermissionRule
from sessions.models import AuditEvent, ToolCall, Via
from tests import conftest
from tests.browser.conftest import SCREENSHOTS, TIMEOUT_MS, log_in
from tests.browser.test_playground_browser import call_status, open_playground, pick_tool
from tests.conftest import PortalProcess, free_port

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)

APP = "ui://demo/chart.html"


@pytest.fixture(scope="module")
def live_portal(django_db_setup, django_db_blocker, worker) -> Iterator[dict]:
    """The real portal (as tests/browser/conftest.py starts it) with its apps origin on a port of its own."""
    from django.db import connection

    with django_db_blocker.unblock():
        db = dict(connection.settings_dict)
    port, apps_port = conftest.LIVE_PORTAL_PORT, free_port()
    log = Path(settings.VAR_DIR) / f"test-apps-portal-{port}.log"
    portal = PortalProcess(db, log, port=port, args=("--apps-port", str(apps_port)))
    try:
        portal.start()
        assert f"MCP Apps sandbox on port {apps_port}" in portal.log.read_text(), portal.log.read_text()
        yield {"url": portal.url, "log": portal.log, "apps": f"http://127.0.0.1:{apps_port}"}
    finally:
        portal.stop()
        portal.log.unlink(missing_ok=True)


def open_chart(page: Page, demo_server):
    """Call the demo's chart tool in the playground; the app's frame, once it drew the result."""
    log_in(page, "alice", "pw-alice")
    open_playground(page, demo_server)
    pick_tool(page, "Chart some numbers")
    page.get_by_role("button", name="Call tool").click()
    expect(call_status(page)).to_contain_text("Succeeded")
    expect(page.locator("#app-uri")).to_have_text(APP)
    app = page.frame_locator("#app-frame").frame_locator("iframe")
    expect(app.locator("#total")).to_have_text("14")
    return app


def app_frame(page: Page) -> Frame:
    """The app's own document (the sandbox page's inner iframe), to run a script in it as the app would."""
    return next(frame for frame in page.frames if frame.url == "about:srcdoc")


def test_the_apps_tool_call_is_asked_about_naming_the_app_and_deny_refuses_it(page: Page, alice, demo_server):
    PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo__add", effect=Effect.ASK)
    app = open_chart(page, demo_server)
    # Its own size: the app told the playground (ui/notifications/size-changed), within the cap.
    height = page.locator("#app-frame").evaluate("frame => frame.getBoundingClientRect().height")
    assert 60 <= height <= 800 and height != 240

    app.get_by_role("button", name="Add it (calls the add tool)").click()
    dialog = page.get_by_role("dialog", name="Allow this tool call?")
    expect(dialog).to_be_visible()
    expect(dialog.locator("#approval-caller")).to_have_text(f"The MCP App {APP}")
    expect(dialog.locator("#approval-tool")).to_have_text("add")
    expect(dialog.locator("#approval-arguments")).to_contain_text('"a": 14')
    dialog.get_by_role("button", name="Deny").click()
    expect(app.locator("#status")).to_contain_text("The portal refused the call: rejected:")
    expect(app.locator("#total")).to_have_text("14")

    app.get_by_role("button", name="Add it (calls the add tool)").click()
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Allow once").click()
    expect(app.locator("#status")).to_have_text("add returned 16")
    expect(app.locator("#total")).to_have_text("16")
    page.screenshot(path=str(SCREENSHOTS / "mcp-app.png"), full_page=True)
    # The result pane still shows the chart call: the app's calls are the app's.
    expect(page.locator("#tool-title")).to_have_text("Chart some numbers")
    assert page.problems == []

    added = list(ToolCall.objects.filter(tool="add").order_by("created_at"))
    assert [(c.status, c.via, c.client) for c in added] == [
        ("rejected", Via.APP, APP),
        ("succeeded", Via.APP, APP),
    ]
    assert AuditEvent.objects.filter(call_id=added[1].pk, via=Via.APP, client=APP).exists()

    page.goto("/calls/?via=app")
    rows = page.locator("table tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("MCP App")
    expect(rows.first).to_contain_text(APP)
    page.goto("/audit/")
    expect(page.locator("table")).to_contain_text(f"via MCP App · {APP}")


def test_a_script_in_the_app_cannot_read_the_portals_cookies_or_page(page: Page, alice, demo_server, live_portal):
    # A cookie a script on the portal's own origin can read: the app must not.
    page.context.add_cookies([{"name": "portal_probe", "value": "secret", "url": live_portal["url"]}])
    open_chart(page, demo_server)
    assert "portal_probe=secret" in page.evaluate("document.cookie")
    probes = app_frame(page).evaluate(
        """async () => {
            const attempt = async (f) => { try { return `read: ${await f()}`; } catch (e) { return `refused: ${e.name}`; } };
            return {
                cookie: await attempt(() => document.cookie),
                storage: await attempt(() => localStorage.length),
                sandbox: await attempt(() => parent.document.body.innerHTML),
                playground: await attempt(() => parent.parent.document.cookie),
                top: await attempt(() => top.location.href),
                fetch: await attempt(async () => (await fetch(%r)).status),
            };
        }"""
        % (live_portal["url"] + "/calls/")
    )
    assert probes["cookie"] == "refused: SecurityError", probes
    assert probes["storage"] == "refused: SecurityError", probes
    assert probes["sandbox"] == "refused: SecurityError", probes
    assert probes["playground"] == "refused: SecurityError", probes
    assert probes["top"] == "refused: SecurityError", probes
    # No network: the resource declared no connectDomains, so its sandbox's policy allows none.
    assert probes["fetch"] == "refused: TypeError", probes


def test_a_javascript_link_is_not_opened_and_a_web_link_asks_first(page: Page, alice, demo_server):
    app = open_chart(page, demo_server)
    popups: list = []
    page.context.on("page", lambda opened: popups.append(opened))
    app_frame(page).evaluate(
        """() => parent.postMessage({ jsonrpc: "2.0", id: 900, method: "ui/open-link",
                                      params: { url: "javascript:document.title='opened'" } }, "*")"""
    )
    expect(page.locator("#app-activity")).to_contain_text("Refused to open javascript:")
    expect(page.get_by_role("dialog", name="Open a link from the app?")).to_be_hidden()

    app.get_by_role("button", name="Open modelcontextprotocol.io").click()
    asked = page.get_by_role("dialog", name="Open a link from the app?")
    expect(asked).to_be_visible()
    expect(asked.locator("#app-link-url")).to_have_text("https://modelcontextprotocol.io/")
    asked.get_by_role("button", name="Do not open it").click()
    expect(app.locator("#status")).to_have_text("The link was not opened.")
    assert popups == [] and page.title() != "opened"

    # ui/message is shown as the app's; resources/read reaches the app's own server.
    app.get_by_role("button", name="Tell the playground").click()
    expect(page.locator("#app-activity .app-message")).to_contain_text("The chart's total is 14.")
    app.get_by_role("button", name="Read demo://readme").click()
    expect(app.locator("#status")).to_have_text("The readme says: This is the portal's demo server.")
    assert page.problems == []


def test_the_apps_origin_serves_only_the_sandbox_page(live_portal):
    with urllib.request.urlopen(live_portal["apps"] + "/?csp=%7B%7D") as response:
        policy = response.headers["Content-Security-Policy"]
        assert response.headers.get("Set-Cookie") is None
    assert "connect-src 'none'" in policy and f"frame-ancestors {live_portal['url']}" in policy
    for path in ("/calls/", "/accounts/login/", "/static/playground.js", "/healthz", "/mcp/"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(live_portal["apps"] + path)
        assert refused.value.code == 404 and refused.value.headers.get("Set-Cookie") is None
