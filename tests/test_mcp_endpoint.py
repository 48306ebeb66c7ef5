"""The portal's MCP endpoint, through a real portal process, with the SDK's own client in both eras.

The portal serves `/mcp/` and `/mcp/<server>/` (docs/mcp-endpoint.md); a real worker runs the
calls against the demo server, the same path as the playground's.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.utils import timezone

from tests.conftest import PortalProcess

pytestmark = pytest.mark.django_db(transaction=True)

ERAS = ["legacy", "2026-07-28"]


@pytest.fixture(scope="module")
def portal(django_db_setup, django_db_blocker, worker) -> Iterator[PortalProcess]:
    from django.db import connection

    with django_db_blocker.unblock():
        db = dict(connection.settings_dict)
    process = PortalProcess(db, Path(settings.VAR_DIR) / "test-endpoint.log")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def demo(demo_server):
    from servers.models import Effect, PermissionRule

    PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo", effect=Effect.ALLOW)
    return demo_server


def token_for(user, servers=None) -> str:
    from sessions.access_tokens import do_create_token

    return do_create_token(user, "test", servers=servers)[1]


async def _session(url: str, token: str, mode: str, work, **options: Any) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(60, read=120))
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode, **options) as client:
            return await work(client)


def run(url: str, token: str, mode: str, work, **options: Any) -> Any:
    return asyncio.run(_session(url, token, mode, work, **options))


def answering(user, answer: str) -> threading.Thread:
    """The person, answering the first approval that waits (as the inbox would), in a thread of its own."""
    from sessions import actions
    from sessions.models import Approval, ApprovalState

    def answer_when_asked() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            approval = Approval.objects.filter(state=ApprovalState.PENDING).first()
            if approval is not None:
                actions.do_answer_approval(user, approval.pk, answer)
                return
            time.sleep(0.2)

    person = threading.Thread(target=answer_when_asked)
    person.start()
    return person


def open_handshake_session(url: str, token: str) -> str:
    """A handshake-era session opened by hand (initialize), as any client opens one; its id."""
    opened = httpx.post(
        url,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
    )
    assert opened.status_code == 200, opened.text
    return opened.headers["mcp-session-id"]


def names(listing) -> list[str]:
    return sorted(tool.name for tool in listing.tools)


@pytest.mark.parametrize("mode", ERAS)
def test_one_server_lists_and_calls_under_its_own_names(portal, alice, demo, mode):
    from sessions.models import ToolCall, Via

    token = token_for(alice)

    async def work(client):
        listed = await client.list_tools()
        echoed = await client.call_tool("echo", {"message": "through the portal"})
        return listed, echoed

    listed, echoed = run(f"{portal.url}/mcp/demo/", token, mode, work)
    assert "echo" in names(listed) and "add" in names(listed)
    assert echoed.is_error is False
    assert echoed.content[0].text == "through the portal"
    call = ToolCall.objects.get(tool="echo")
    assert (call.via, call.status, call.user) == (Via.MCP, "succeeded", alice)
    assert call.access_token is not None and call.client  # the SDK's client names itself


@pytest.mark.parametrize("mode", ERAS)
def test_the_aggregate_endpoint_prefixes_each_servers_tools(portal, alice, demo, mode):
    token = token_for(alice)

    async def work(client):
        return await client.list_tools(), await client.call_tool("demo__add", {"a": 2, "b": 3})

    listed, added = run(f"{portal.url}/mcp/", token, mode, work)
    assert "demo__echo" in names(listed)
    assert all(len(f"mcp__portal__{name}") <= 64 for name in names(listed))
    assert added.is_error is False and added.structured_content == {"sum": 5.0}


def test_a_denied_tool_is_not_listed_and_its_call_names_the_rule(portal, alice, demo):
    from servers.models import Effect, PermissionRule

    PermissionRule.objects.create(team=demo.team, pattern="mcp__demo__echo", effect=Effect.DENY)
    token = token_for(alice)

    async def work(client):
        return await client.list_tools(), await client.call_tool("echo", {"message": "no"})

    listed, refused = run(f"{portal.url}/mcp/demo/", token, "2026-07-28", work)
    assert "echo" not in names(listed) and "add" in names(listed)
    assert refused.is_error is True
    assert "mcp__demo__echo" in refused.content[0].text


def test_a_rule_added_while_a_client_is_connected_stops_its_next_call(portal, alice, demo):
    from servers.models import Effect, PermissionRule

    token = token_for(alice)

    async def work(client):
        first = await client.call_tool("echo", {"message": "one"})
        await asyncio.to_thread(
            PermissionRule.objects.create, team=demo.team, pattern="mcp__demo__echo", effect=Effect.DENY
        )
        second = await client.call_tool("echo", {"message": "two"})
        return first, second

    first, second = run(f"{portal.url}/mcp/demo/", token, "legacy", work)
    assert first.is_error is False
    assert second.is_error is True and "mcp__demo__echo" in second.content[0].text


@pytest.mark.parametrize("mode", ERAS)
def test_progress_of_the_upstream_server_reaches_the_client(portal, alice, demo, mode):
    token = token_for(alice)
    heard: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(progress)

    async def work(client):
        return await client.call_tool("count", {"steps": 3, "delay": 0.2}, progress_callback=on_progress)

    counted = run(f"{portal.url}/mcp/demo/", token, mode, work)
    assert counted.is_error is False
    assert heard and heard[-1] == 3


def test_a_call_that_asks_is_held_until_the_person_answers(portal, alice, demo):
    from servers.models import Effect, PermissionRule
    from sessions.models import ToolCall

    PermissionRule.objects.create(team=demo.team, pattern="mcp__demo__echo", effect=Effect.ASK)
    token = token_for(alice)

    answering(alice, "allow_once")

    async def work(client):
        listed = await client.list_tools()
        return listed, await client.call_tool("echo", {"message": "may I?"})

    listed, answered = run(f"{portal.url}/mcp/demo/", token, "legacy", work)
    echo = next(tool for tool in listed.tools if tool.name == "echo")
    assert "approval" in (echo.description or "").lower()
    assert answered.is_error is False and answered.content[0].text == "may I?"
    assert ToolCall.objects.get(tool="echo").decision["effect"] == "allow"


def test_a_declined_call_ends_with_a_tool_error(portal, alice, demo):
    from servers.models import Effect, PermissionRule

    PermissionRule.objects.create(team=demo.team, pattern="mcp__demo__echo", effect=Effect.ASK)
    token = token_for(alice)

    decliner = answering(alice, "deny")
    declined = run(f"{portal.url}/mcp/demo/", token, "2026-07-28", lambda c: c.call_tool("echo", {"message": "may I?"}))
    decliner.join()
    assert declined.is_error is True and "declined" in declined.content[0].text


def test_without_a_token_the_endpoint_says_where_to_sign_in(portal):
    answer = httpx.post(f"{portal.url}/mcp/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert answer.status_code == 401
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{portal.url}/.well-known/oauth-protected-resource/mcp"' in challenge
    bad = httpx.post(
        f"{portal.url}/mcp/demo/",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": "Bearer mcpp_not-a-token"},
    )
    assert bad.status_code == 401 and 'error="invalid_token"' in bad.headers["www-authenticate"]


def test_another_origin_or_host_is_refused(portal, alice, demo):
    token = token_for(alice)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    evil = httpx.post(f"{portal.url}/mcp/demo/", json=body, headers={**headers, "Origin": "http://evil.example"})
    assert evil.status_code == 403
    rebound = httpx.post(f"{portal.url}/mcp/demo/", json=body, headers={**headers, "Host": "evil.example"})
    assert rebound.status_code == 403


def test_a_person_sees_only_their_own_teams_servers(portal, alice, carol, demo):
    from servers.models import Server

    globex = Server.objects.create(
        team=carol.memberships.get().team, name="globex-demo", transport="stdio", command="x", created_by=carol
    )
    token = token_for(alice)
    listed = run(f"{portal.url}/mcp/", token, "2026-07-28", lambda c: c.list_tools())
    assert not any(name.startswith("globex") for name in names(listed))
    # Another team's server reads as unknown on its own path, and its tool names are not callable.
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    other = httpx.post(f"{portal.url}/mcp/{globex.name}/", json=body, headers={"Authorization": f"Bearer {token}"})
    assert other.status_code == 404
    refused = run(f"{portal.url}/mcp/", token, "legacy", lambda c: c.call_tool("globex-demo__echo", {}))
    assert refused.is_error is True


def test_a_token_limited_to_some_servers_reaches_only_those(portal, alice, demo):
    from servers.models import Server

    other = Server.objects.create(
        team=demo.team, name="other", transport="stdio", command="x", created_by=alice, tools=[{"name": "t"}]
    )
    token = token_for(alice, servers=[other])
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    refused = httpx.post(f"{portal.url}/mcp/demo/", json=body, headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 404


@pytest.mark.parametrize("mode", ERAS)
def test_an_app_only_tool_is_offered_only_to_a_client_that_renders_apps(portal, alice, demo, mode):
    """MCP Apps' `visibility: ["app"]`: the tool is its app's, not the model's (audience, not
    permission). The handshake era's list says every tool may run as a task (the portal runs it)."""
    from mcp.client.extension import advertise

    from servers.models import Effect, PermissionRule, Server

    app = {"resourceUri": "ui://charts/app.html"}
    Server.objects.create(
        team=demo.team,
        name="charts",
        transport="stdio",
        command="x",
        created_by=alice,
        tools_listed_at=timezone.now(),
        tools=[
            {"name": "chart", "inputSchema": {"type": "object"}, "_meta": {"ui": app}},
            {"name": "refresh", "inputSchema": {"type": "object"}, "_meta": {"ui": {**app, "visibility": ["app"]}}},
        ],
    )
    PermissionRule.objects.create(team=demo.team, pattern="mcp__charts", effect=Effect.ALLOW)
    token, url = token_for(alice), f"{portal.url}/mcp/charts/"

    async def work(client):
        return await client.list_tools()

    to_a_model = run(url, token, mode, work)
    renders = advertise("io.modelcontextprotocol/ui", {"mimeTypes": ["text/html;profile=mcp-app"]})
    to_an_app_host = run(url, token, mode, work, extensions=[renders])
    assert names(to_a_model) == ["chart"]
    assert names(to_an_app_host) == ["chart", "refresh"]
    if mode == "legacy":
        assert {tool.execution.task_support for tool in to_a_model.tools} == {"optional"}


def test_a_revoked_token_is_refused_at_once(portal, alice, demo):
    from sessions.access_tokens import do_create_token, do_revoke_token

    row, token = do_create_token(alice, "soon revoked")
    assert run(f"{portal.url}/mcp/demo/", token, "2026-07-28", lambda c: c.list_tools()).tools
    do_revoke_token(alice, row.pk)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    answer = httpx.post(f"{portal.url}/mcp/demo/", json=body, headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 401


def test_a_handshake_session_is_bound_to_the_token_that_opened_it(portal, alice, bob, demo):
    alice_token, bob_token = token_for(alice), token_for(bob)
    accept = {"Accept": "application/json, text/event-stream"}
    session = open_handshake_session(f"{portal.url}/mcp/demo/", alice_token)
    stolen = httpx.post(
        f"{portal.url}/mcp/demo/",
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        headers={
            "Authorization": f"Bearer {bob_token}",
            "Mcp-Session-Id": session,
            "Mcp-Protocol-Version": "2025-11-25",
            **accept,
        },
    )
    assert stolen.status_code == 404


@pytest.mark.parametrize("mode", ERAS)
def test_resources_and_prompts_are_relayed(portal, alice, demo, mode):
    token = token_for(alice)

    async def work(client):
        resources = await client.list_resources()
        readme = await client.read_resource("demo://readme")
        prompts = await client.list_prompts()
        review = await client.get_prompt("review", {"code": "print(1)"})
        return resources, readme, prompts, review

    resources, readme, prompts, review = run(f"{portal.url}/mcp/demo/", token, mode, work)
    assert "demo://readme" in [str(r.uri) for r in resources.resources]
    assert readme.contents and "portal" in readme.contents[0].text.lower()
    assert "review" in [p.name for p in prompts.prompts]
    assert "print(1)" in review.messages[0].content.text

    async def aggregate(client):
        return await client.list_prompts(), await client.read_resource("demo://readme")

    prompts, readme = run(f"{portal.url}/mcp/", token, mode, aggregate)
    assert "demo__review" in [p.name for p in prompts.prompts]
    assert readme.contents


def test_log_messages_of_the_upstream_server_reach_the_client(portal, alice, demo):
    token = token_for(alice)
    heard: list[str] = []

    async def on_log(params) -> None:
        heard.append(str(params.data))

    async def work(client):
        return await client.call_tool("chatter", {"text": "relayed"})

    said = run(f"{portal.url}/mcp/demo/", token, "legacy", work, logging_callback=on_log)
    assert said.is_error is False
    assert any("relayed" in line for line in heard)


@pytest.mark.parametrize("mode", ERAS)
def test_the_clients_cancel_cancels_the_upstream_call(portal, alice, demo, mode):
    import anyio

    from sessions.models import ToolCall

    token = token_for(alice)

    async def work(client):
        with anyio.move_on_after(3):
            await client.call_tool("sleep", {"seconds": 30})
        return "gave up"

    assert run(f"{portal.url}/mcp/demo/", token, mode, work) == "gave up"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        call = ToolCall.objects.get(tool="sleep")
        if call.finished:
            break
        time.sleep(0.2)
    assert call.status == "cancelled", (call.status, call.error)


@pytest.mark.parametrize("mode", ERAS)
def test_a_form_goes_to_a_client_that_can_answer_it(portal, alice, demo, mode):
    import mcp_types as types

    token = token_for(alice)
    asked: list[str] = []

    async def on_elicit(ctx, params):
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"name": "Ada", "email": "ada@example.org"})

    answered = run(
        f"{portal.url}/mcp/demo/",
        token,
        mode,
        lambda c: c.call_tool("ask", {"topic": "the endpoint"}),
        elicitation_callback=on_elicit,
    )
    assert asked == ["Who should we contact about the endpoint?"]
    assert answered.content[0].text == "will contact Ada <ada@example.org> about the endpoint"


@pytest.mark.parametrize("mode", ERAS)
def test_a_sampling_request_goes_to_a_client_that_can_answer_it(portal, alice, demo, mode):
    import mcp_types as types

    token = token_for(alice)

    async def on_sample(ctx, params):
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="short."), model="client-model"
        )

    said = run(
        f"{portal.url}/mcp/demo/",
        token,
        mode,
        lambda c: c.call_tool("summarize", {"text": "a long text"}),
        sampling_callback=on_sample,
    )
    assert said.content[0].text == "client-model says: short."


def test_a_form_for_a_client_without_the_capability_is_answered_in_the_browser(portal, alice, demo):
    from tests.security.conftest import DaphneSocket
    from tests.ws import session_cookie

    token, cookie = token_for(alice), session_cookie(alice)

    async def person() -> None:
        # The person's open playground page: it hears the form and answers it (docs/websocket-protocol.md).
        async with DaphneSocket(portal.socket_address, cookie) as page:
            while True:
                event = await page.receive(timeout=60)
                if event.get("type") == "elicitation.requested":
                    break
            content = {"name": "Bo", "email": "bo@example.org"}
            await page.send(
                {
                    "type": "answer_elicitation",
                    "elicitation": event["elicitation"],
                    "action": "accept",
                    "content": content,
                }
            )
            while (await page.receive(timeout=60)).get("type") != "elicitation.answered":
                pass

    async def both():
        answering = asyncio.ensure_future(person())
        await asyncio.sleep(0.5)  # the page is open before the call starts, as a person's would be
        answered = await _session(
            f"{portal.url}/mcp/demo/", token, "2026-07-28", lambda c: c.call_tool("ask", {"topic": "x"})
        )
        await answering
        return answered

    answered = asyncio.run(both())
    assert answered.content[0].text == "will contact Bo <bo@example.org> about x"


QUICK = {
    "PORTAL_APPROVAL_TIMEOUT": "4",
    "PORTAL_ENDPOINT_KEEPALIVE_SECONDS": "1",
    "PORTAL_ENDPOINT_REQUESTS_PER_MINUTE": "8",
    "PORTAL_ENDPOINT_WATCH_SECONDS": "0.5",
}


@pytest.fixture(scope="module")
def quick_portal(django_db_setup, django_db_blocker, worker) -> Iterator[PortalProcess]:
    """A portal whose approvals time out after 4 s, whose held calls send progress every second, and
    which serves 8 requests a minute per token."""
    import os

    from django.db import connection

    with django_db_blocker.unblock():
        db = dict(connection.settings_dict)
    saved = {name: os.environ.get(name) for name in QUICK}
    os.environ.update(QUICK)
    try:
        process = PortalProcess(db, Path(settings.VAR_DIR) / "test-endpoint-quick.log").start()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    yield process
    process.stop()


def test_a_held_call_sends_progress_while_it_waits_and_times_out_with_a_message(quick_portal, alice, demo):
    from servers.models import Effect, PermissionRule
    from sessions.models import ToolCall

    PermissionRule.objects.create(team=demo.team, pattern="mcp__demo__echo", effect=Effect.ASK)
    # Listed before, so the portal process asks at once, with its own 4 s timeout (a call of a tool it
    # does not know yet is asked about by the worker, with the worker's timeout).
    demo.tools = [{"name": "echo", "inputSchema": {"type": "object", "properties": {"message": {"type": "string"}}}}]
    demo.tools_listed_at = timezone.now()
    demo.save()
    token = token_for(alice)
    heard: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(message or "")

    async def work(client):
        return await client.call_tool("echo", {"message": "anyone?"}, progress_callback=on_progress)

    ended = run(f"{quick_portal.url}/mcp/demo/", token, "legacy", work)
    assert ended.is_error is True and "within 4 s" in ended.content[0].text
    assert len(heard) >= 2 and all("approval" in message for message in heard)
    assert ToolCall.objects.get(tool="echo").status == "timed_out"


def test_each_token_has_its_own_rate_limit(quick_portal, alice, demo):
    first, second = token_for(alice), token_for(alice)
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    answers = [
        httpx.post(f"{quick_portal.url}/mcp/demo/", json=body, headers={"Authorization": f"Bearer {first}"})
        for _ in range(12)
    ]
    statuses = [answer.status_code for answer in answers]
    assert 429 in statuses and statuses.index(429) == 8, statuses
    limited = answers[-1]
    assert int(limited.headers["retry-after"]) >= 1 and "requests to the MCP endpoint" in limited.text
    other = httpx.post(f"{quick_portal.url}/mcp/demo/", json=body, headers={"Authorization": f"Bearer {second}"})
    assert other.status_code != 429


def test_another_persons_held_call_never_reaches_ones_approvals(portal, alice, bob, demo):
    from servers.models import Effect, PermissionRule
    from sessions import actions
    from sessions.models import Approval, ApprovalState

    PermissionRule.objects.create(team=demo.team, pattern="mcp__demo__echo", effect=Effect.ASK)
    token = token_for(bob)
    seen: dict[str, Any] = {}

    def look_then_answer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            approval = Approval.objects.filter(state=ApprovalState.PENDING).first()
            if approval is not None:
                seen["alice"] = actions.do_list_pending_approvals(alice)
                seen["bob"] = actions.do_list_pending_approvals(bob)
                try:
                    actions.do_answer_approval(alice, approval.pk, "allow_once")
                except actions.ApprovalError as exc:
                    seen["alice_answer"] = str(exc)
                actions.do_answer_approval(bob, approval.pk, "deny")
                return
            time.sleep(0.2)

    looker = threading.Thread(target=look_then_answer)
    looker.start()
    ended = run(f"{portal.url}/mcp/demo/", token, "2026-07-28", lambda c: c.call_tool("echo", {"message": "bob's"}))
    looker.join()
    assert seen["alice"] == [] and len(seen["bob"]) == 1
    assert seen["alice_answer"] == "Unknown approval."
    assert ended.is_error is True and "declined" in ended.content[0].text


def test_arguments_nested_past_the_limit_are_refused_with_a_tool_error(portal, alice, demo):
    from sessions.models import ToolCall

    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(200):
        inner["x"] = {}
        inner = inner["x"]
    token = token_for(alice)
    refused = run(f"{portal.url}/mcp/demo/", token, "2026-07-28", lambda c: c.call_tool("echo", {"message": deep}))
    assert refused.is_error is True and "nested too deeply" in refused.content[0].text
    assert not ToolCall.objects.exists()


def test_a_handshake_client_hears_that_its_tool_list_changed(quick_portal, alice, demo):
    import mcp_types as types

    from servers.models import Effect, PermissionRule

    token = token_for(alice)

    async def work():
        heard = asyncio.Event()

        async def on_message(message) -> None:
            if isinstance(message, types.ToolListChangedNotification):
                heard.set()

        async def inside(client):
            before = await client.list_tools()
            await asyncio.to_thread(
                PermissionRule.objects.create, team=demo.team, pattern="mcp__demo__echo", effect=Effect.DENY
            )
            await asyncio.wait_for(heard.wait(), 30)
            return before, await client.list_tools()

        return await _session(f"{quick_portal.url}/mcp/demo/", token, "legacy", inside, message_handler=on_message)

    before, after = asyncio.run(work())
    assert "echo" in names(before) and "echo" not in names(after)


@pytest.fixture
def legacy_demo(demo):
    """The demo server over the handshake era, where it can send people to pages (URL mode, -32042)."""
    demo.protocol = "legacy"
    demo.save()
    return demo


@pytest.mark.parametrize("mode", ERAS)
def test_a_page_to_visit_goes_to_a_client_that_can_offer_it(portal, alice, legacy_demo, mode):
    import mcp_types as types

    token = token_for(alice)
    offered: list[str] = []

    async def on_elicit(ctx, params):
        offered.append(f"{params.mode} {params.url}")
        return types.ElicitResult(action="accept")

    connected = run(
        f"{portal.url}/mcp/demo/",
        token,
        mode,
        lambda c: c.call_tool("connect_account", {}),
        elicitation_callback=on_elicit,
    )
    assert offered == ["url https://example.org/consent"]
    assert connected.content[0].text == "account connected"


def test_a_servers_32042_reaches_a_handshake_client_as_the_same_error(portal, alice, legacy_demo):
    from mcp.shared.exceptions import MCPError

    token = token_for(alice)

    async def work(client):
        try:
            await client.call_tool("needs_authorization", {"account": "endpoint"})
        except MCPError as exc:
            return exc
        return None

    error = run(f"{portal.url}/mcp/demo/", token, "legacy", work)
    assert isinstance(error, MCPError) and error.error.code == -32042
    assert error.error.data["elicitations"][0]["url"] == "https://example.org/consent?account=endpoint"
    # Called again, as the error asks: the server says it is authorized now.
    again = run(
        f"{portal.url}/mcp/demo/",
        token,
        "2026-07-28",
        lambda c: c.call_tool("needs_authorization", {"account": "endpoint"}),
    )
    assert again.content[0].text == "endpoint is authorized"


def test_a_subscription_brings_the_servers_news_until_unsubscribed(portal, alice, demo):
    import mcp_types as types

    token = token_for(alice)

    async def work():
        updated: list[str] = []
        heard = asyncio.Event()

        async def on_message(message) -> None:
            if isinstance(message, types.ResourceUpdatedNotification):
                updated.append(str(message.params.uri))
                heard.set()

        async def inside(client):
            await client.subscribe_resource("demo://counter")
            touched = await client.call_tool("touch_resource", {})
            await asyncio.wait_for(heard.wait(), 30)
            await client.unsubscribe_resource("demo://counter")
            return touched

        touched = await _session(f"{portal.url}/mcp/demo/", token, "legacy", inside, message_handler=on_message)
        return touched, updated

    touched, updated = asyncio.run(work())
    assert touched.is_error is False
    assert updated == ["demo://counter"]


def test_a_restart_keeps_2026_clients_going_and_tells_handshake_sessions_with_404(django_db_setup, worker, alice, demo):
    from django.db import connection

    token = token_for(alice)
    accept = {"Accept": "application/json, text/event-stream", "Authorization": f"Bearer {token}"}
    process = PortalProcess(dict(connection.settings_dict), Path(settings.VAR_DIR) / "test-endpoint-restart.log")
    process.start()
    try:
        session = open_handshake_session(f"{process.url}/mcp/demo/", token)

        async def across_the_restart():
            async def work(client):
                first = await client.call_tool("echo", {"message": "before"})
                await asyncio.to_thread(process.stop)
                await asyncio.to_thread(process.start)
                return first, await client.call_tool("echo", {"message": "after"})

            return await _session(f"{process.url}/mcp/demo/", token, "2026-07-28", work)

        before, after = asyncio.run(across_the_restart())
        assert before.content[0].text == "before" and after.content[0].text == "after"
        # The handshake era's session lived in the old process: the spec's 404, so the client initializes again.
        forgotten = httpx.post(
            f"{process.url}/mcp/demo/",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**accept, "Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"},
        )
        assert forgotten.status_code == 404
    finally:
        process.stop()


@pytest.mark.parametrize("mode", ERAS)
def test_the_reference_server_through_the_endpoint(portal, alice, everything, mode):
    import mcp_types as types

    token = token_for(alice)
    heard: list[float] = []
    asked: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        heard.append(progress)

    task_news: list[str] = []

    async def on_task_progress(progress: float, total: float | None, message: str | None) -> None:
        task_news.append(message or "")

    async def on_sample(ctx, params):
        asked.append(params.messages[0].content.text)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="sampled."), model="agent-model"
        )

    async def work(client):
        listed = await client.list_tools()
        summed = await client.call_tool("get-sum", {"a": 2, "b": 40})
        ran = await client.call_tool(
            "trigger-long-running-operation", {"duration": 1, "steps": 3}, progress_callback=on_progress
        )
        sampled = await client.call_tool("trigger-sampling-request", {"prompt": "hi", "maxTokens": 20})
        # A tool that runs only as a task is a plain tool to the agent: the worker runs its task.
        researched = await client.call_tool(
            "simulate-research-query", {"topic": "tides"}, progress_callback=on_task_progress
        )
        return listed, summed, ran, sampled, researched

    listed, summed, ran, sampled, researched = run(
        f"{portal.url}/mcp/everything/", token, mode, work, sampling_callback=on_sample
    )
    assert {"echo", "get-sum", "trigger-long-running-operation", "simulate-research-query"} <= set(names(listed))
    research = next(t for t in listed.tools if t.name == "simulate-research-query")
    # Upstream it runs only as a task; here it is a plain tool that may also be called as one.
    shown = research.model_dump(by_alias=True, exclude_none=True).get("execution")
    assert shown == ({"taskSupport": "optional"} if mode == "legacy" else None), shown
    assert "Research Report: tides" in researched.content[0].text
    # The task's status line reaches the agent as progress, which keeps its idle timer from running out.
    assert "Task working: Gathering sources..." in task_news and task_news[-1].startswith("Task completed"), task_news
    assert "42" in summed.content[0].text
    assert ran.is_error is False and heard[-1] == 3
    assert asked and "hi" in asked[0]
    assert "sampled." in str(sampled.content[0].text)
