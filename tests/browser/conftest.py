"""Real Chromium against the real portal process.

`live_portal` runs `manage.py runportal` as a subprocess on the test database, so the
browser exercises what `make run` serves: Daphne, the static files, the WebSocket and a
real Celery worker (the portal's own worker threads in the embedded mode; the session
`worker` process in the distributed mode). Tests use the transactional database so the rows
they create are committed, and therefore visible to that other process.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings

from tests import conftest
from tests.conftest import ROOT, PortalProcess

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
VIEWPORT = {"width": 1440, "height": 900}
SCREENSHOTS = ROOT / "docs" / "screenshots"
# Long enough for a cold stdio server start on a loaded machine, short enough to fail fast.
TIMEOUT_MS = 20_000


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    # Keep each phase's report on the item, so `page` can tell whether the test failed.
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


# -- the portal process ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def live_portal(django_db_setup, django_db_blocker, worker) -> Iterator[dict]:
    """The real portal on a free port, on the test database; yields {"url", "log"}.

    Module scope keeps one process (and its warm MCP connections) for a file's tests; each
    test still gets a clean database from `transactional_db`, which flushes after it.
    """
    from django.db import connection

    with django_db_blocker.unblock():
        db = dict(connection.settings_dict)
    # The address every process of the run was told (SITE_URL, for the OAuth redirect URI).
    port = conftest.LIVE_PORTAL_PORT
    portal = PortalProcess(db, Path(settings.VAR_DIR) / f"test-browser-portal-{port}.log", port=port)
    try:
        portal.start()
        # Guard against testing the wrong thing: the process must run in this run's mode.
        banner = "(embedded:" if settings.EMBEDDED else "(distributed)"
        assert banner in portal.log.read_text(), portal.log.read_text()
        yield {"url": portal.url, "log": portal.log, "process": portal.process}
    finally:
        portal.stop()
        # The log is only worth keeping when something went wrong (it is printed then).
        portal.log.unlink(missing_ok=True)


# -- the browser ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator:
    """One headless Chromium per test module.

    Playwright's sync API keeps an asyncio loop running on the main thread while it is
    started, which makes Django refuse ORM calls from tests ("async context") and breaks
    asyncio.run() in later modules; so Django's check is lifted only while it runs, and it
    stops at the end of the module rather than of the session.
    """
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()
    finally:
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def page(browser, live_portal, request: pytest.FixtureRequest) -> Iterator:
    """A fresh browser context (no cookies) with the portal as base URL.

    Page errors and console errors are collected on page.problems; a test that expects
    none asserts on them. On failure, a screenshot and the portal's log tail are kept.
    """
    context = browser.new_context(base_url=live_portal["url"], viewport=VIEWPORT)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"pageerror: {error}"))

    def on_console(message) -> None:
        # Chromium asks for /favicon.ico on its own; the portal has none, which is no error of a page.
        if message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
            problems.append(f"console: {message.text} ({message.location.get('url')})")

    page.on("console", on_console)
    page.problems = problems
    yield page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        failures = Path(settings.VAR_DIR) / "browser-failures"
        failures.mkdir(exist_ok=True)
        shot = failures / f"{request.node.name}.png"
        try:
            page.screenshot(path=str(shot), full_page=True)
        except Exception:  # noqa: BLE001 - the report matters more than the screenshot
            pass
        tail = live_portal["log"].read_text(errors="replace")[-4000:]
        print(f"\n--- screenshot: {shot}\n--- portal log (tail):\n{tail}\n--- page problems: {problems}")
    context.close()


def log_in(page, username: str, password: str, next: str = "") -> None:
    """Through the real allauth login page, as a person would; to `next` after, if given (else the
    home page, which redirects to the playground, whose socket lists the first server's tools)."""
    page.goto("/accounts/login/" + (f"?next={next}" if next else ""))
    page.get_by_label("Login").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    # Logged in: the main navigation appears (the home page redirects to the playground).
    page.get_by_role("navigation", name="Main").wait_for()
