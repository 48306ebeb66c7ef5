"""Importing a Claude Desktop config in real Chromium: preview first, nothing created on error."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import Page, expect

from servers.models import Server
from tests.browser.conftest import TIMEOUT_MS, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)

CLAUDE_DESKTOP = {
    "mcpServers": {
        "filesystem": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]},
        # Commands the embedded mode's defaults let a team admin register (PORTAL_STDIO_COMMANDS).
        "github": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-github"],
            "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"},
        },
        "remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"X-Team": "acme"}},
    }
}


def test_it_previews_then_creates_the_servers(page: Page, alice):
    log_in(page, "alice", "pw-alice")
    page.goto("/servers/import/")
    page.get_by_label("mcpServers JSON").fill(json.dumps(CLAUDE_DESKTOP, indent=2))
    page.get_by_role("button", name="Preview").click()

    rows = page.locator("#import-preview tbody tr")
    expect(rows).to_have_count(3)
    expect(page.locator('#import-preview tr[data-status="new"]')).to_have_count(3)
    expect(page.locator("#import-preview")).to_contain_text("GITHUB_TOKEN")  # a placeholder to fill in
    assert not Server.objects.exists()  # a preview creates nothing

    page.get_by_role("button", name="Create 3 servers").click()
    expect(page.get_by_role("heading", name="MCP servers")).to_be_visible()
    expect(page.get_by_role("link", name="filesystem", exact=True)).to_be_visible()
    assert set(Server.objects.values_list("name", flat=True)) == {"filesystem", "github", "remote"}
    assert Server.objects.get(name="github").env == {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}


def test_an_entry_in_error_blocks_the_whole_import(page: Page, alice):
    log_in(page, "alice", "pw-alice")
    page.goto("/servers/import/")
    broken = {
        "mcpServers": {
            "ok": {"command": "uvx", "args": ["mcp-server-time"]},
            "bad": {"command": "x", "args": "not-a-list"},
        }
    }
    page.get_by_label("mcpServers JSON").fill(json.dumps(broken))
    page.get_by_role("button", name="Preview").click()

    expect(page.locator("#import-error")).to_contain_text("Nothing will be created")
    expect(page.locator('#import-preview tr[data-status="error"]')).to_contain_text("bad")
    expect(page.get_by_role("button", name="Create 1 server")).to_have_count(0)

    page.get_by_label("mcpServers JSON").fill("{not json")
    page.get_by_role("button", name="Preview again").click()
    expect(page.locator("#import-error")).to_contain_text("Nothing was created")
    assert not Server.objects.exists()
