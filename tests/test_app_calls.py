"""Calls an MCP App makes, over the playground's socket (sessions/app_calls.py): marked with the app's
ui:// URI, they are decided by the same rules as the person's and recorded `via: app`; an app may call
only its own server's tools. Through the real ASGI application, a real worker and the demo server."""

from __future__ import annotations

import pytest

from servers.models import Effect, PermissionRule, Server
from sessions.app_calls import refusal
from sessions.mcp.apps import resource_uri
from sessions.models import AuditEvent, ToolCall, Via
from tests.ws import Playground, run, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

APP = "ui://demo/chart.html"


async def listed(ws: Playground, server: Server) -> None:
    # The portal knows a server's apps from its last tool list.
    await ws.send({"type": "list_tools", "server": server.pk})
    await ws.until("tools", server=server.pk)


async def app_call(ws: Playground, server: int, tool: str, arguments: dict, app: str = APP) -> dict:
    ref = f"app{len(ws.seen)}"
    await ws.send({"type": "call", "ref": ref, "server": server, "tool": tool, "arguments": arguments, "app": app})
    answer = await ws.until_any({"call.accepted", "error"}, ref=ref)
    return answer if answer["type"] == "error" else await ws.until("call.ended", call=answer["call"])


def test_an_apps_call_runs_under_the_rules_and_is_recorded_as_the_apps(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await listed(ws, demo_server)
            return await app_call(ws, demo_server.pk, "add", {"a": 14, "b": 2})

    ended = run(scenario())
    assert ended["type"] == "call.ended" and ended["status"] == "succeeded", ended
    assert ended["result"]["structuredContent"] == {"sum": 16}
    call = ToolCall.objects.get(pk=ended["call"])
    assert (call.via, call.client, call.tool) == (Via.APP, APP, "add")
    assert set(AuditEvent.objects.filter(call_id=call.pk).values_list("via", "client")) == {(Via.APP, APP)}


def test_a_deny_rule_refuses_an_apps_call_as_it_refuses_the_persons(alice, demo_server):
    PermissionRule.objects.create(team=demo_server.team, pattern="mcp__demo__add", effect=Effect.DENY)
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await listed(ws, demo_server)
            return await app_call(ws, demo_server.pk, "add", {"a": 1, "b": 2})

    ended = run(scenario())
    assert (ended["status"], ended["error_kind"]) == ("rejected", "denied"), ended
    call = ToolCall.objects.get(pk=ended["call"])
    assert (call.status, call.via, call.client) == ("rejected", Via.APP, APP)


def test_an_app_may_not_call_another_servers_tools(alice, demo_server):
    # Another server of the team whose tools name no app: the demo's app has no business there.
    other = Server.objects.create(
        team=demo_server.team,
        name="other",
        transport="stdio",
        command=demo_server.command,
        args=demo_server.args,
        tools=[{"name": "echo", "inputSchema": {"type": "object"}}],
    )
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await listed(ws, demo_server)
            refused = await app_call(ws, other.pk, "echo", {"message": "hi"})
            unknown = await app_call(ws, demo_server.pk, "add", {"a": 1, "b": 2}, app="ui://demo/nothing.html")
            not_ui = await app_call(ws, demo_server.pk, "add", {"a": 1, "b": 2}, app="https://example.com/")
            return refused, unknown, not_ui

    refused, unknown, not_ui = run(scenario())
    assert refused["type"] == "error" and refused["kind"] == "app_refused", refused
    assert "only its own server's tools" in refused["message"]
    assert unknown["kind"] == "app_refused"
    assert not_ui["type"] == "error" and "ui://" in not_ui["message"]
    assert not ToolCall.objects.exists()  # refused before it was a call: nothing ran, nothing to record


def test_the_rules_of_what_an_app_may_call():
    chart = {"name": "chart", "_meta": {"ui": {"resourceUri": APP}}}
    legacy = {"name": "old", "_meta": {"ui/resourceUri": "ui://demo/old.html"}}
    hidden = {"name": "hidden", "_meta": {"ui": {"visibility": ["model"]}}}
    only_app = {"name": "refresh", "_meta": {"ui": {"resourceUri": APP, "visibility": ["app"]}}}
    tools = [chart, legacy, hidden, only_app, {"name": "add"}]
    assert resource_uri(chart) == APP and resource_uri(legacy) == "ui://demo/old.html"
    assert resource_uri({"name": "x", "_meta": {"ui": {"resourceUri": "https://x"}}}) == ""
    assert refusal(tools, APP, "add") == ""
    assert refusal(tools, APP, "refresh") == ""
    assert refusal(tools, "ui://demo/old.html", "chart") == ""
    assert "not callable by apps" in refusal(tools, APP, "hidden")
    assert "not one of them" in refusal(tools, APP, "missing")
    assert "not one of this server's apps" in refusal([{"name": "add"}], APP, "add")
