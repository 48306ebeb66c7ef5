"""An agent's call through the portal's MCP endpoint, approved by its person in real Chromium.

The agent is the SDK's own client against `/mcp/demo/` of the live portal; the person has the
approvals inbox open. The held call appears there live, and Allow once lets the agent's `tools/call`
return the tool's result (docs/mcp-endpoint.md).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest
from playwright.sync_api import Page, expect

from sessions.access_tokens import do_create_token
from sessions.models import ToolCall, Via
from tests.browser.conftest import TIMEOUT_MS, log_in
from tests.browser.test_approvals_inbox_browser import Inbox, count

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

expect.set_options(timeout=TIMEOUT_MS)


def agent_calls(url: str, token: str, tool: str, arguments: dict, mode: str):
    """The agent: an MCP client of its own, its call held open until the person answers."""
    import httpx2
    import mcp_types as types
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    async def session():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60, read=300))
        async with http:
            info = types.Implementation(name="agent-under-test", version="1.0")
            async with Client(streamable_http_client(url, http_client=http), mode=mode, client_info=info) as client:
                return await client.call_tool(tool, arguments)

    return asyncio.run(session())


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_an_agents_call_waits_for_the_person_and_allow_once_returns_its_result(
    page: Page, live_portal, alice, demo_server, mode
):
    token = do_create_token(alice, "laptop")[1]
    log_in(page, "alice", "pw-alice", next="/approvals/")
    inbox = Inbox(page)
    expect(page.get_by_text("Nothing waits for your approval.")).to_be_visible()

    with ThreadPoolExecutor(1) as agent:
        answer = agent.submit(
            agent_calls, f"{live_portal['url']}/mcp/demo/", token, "write_note", {"text": "from the agent"}, mode
        )
        # A tool that is not read-only asks by the team's default: the call is held, and shown here live.
        card = inbox.card("from the agent")
        expect(card.locator("h2")).to_contain_text("agent-under-test 1.0 asks to run demo · write_note")
        expect(count(page)).to_have_text("1 waiting")
        assert not answer.done()
        inbox.answer("from the agent", "Allow once")
        result = answer.result(timeout=TIMEOUT_MS / 1000)

    assert result.is_error is False
    assert result.content[0].text.endswith(": from the agent")
    expect(count(page)).to_be_hidden()
    call = ToolCall.objects.get(tool="write_note")
    assert (call.via, call.client, call.status) == (Via.MCP, "agent-under-test 1.0", "succeeded")
    assert page.problems == []
