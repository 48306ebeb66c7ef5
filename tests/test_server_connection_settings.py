"""Registering SSE and WebSocket servers, ${VAR} in URLs, and the connection settings of a server."""

from __future__ import annotations

import html

import pytest

from servers.models import Server
from sessions.mcp.naming import MAX_DESCRIPTION_LENGTH, TRUNCATED_SUFFIX, full_tool_names
from sessions.models import ConnectionStatus
from tests.helpers import logged_in

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def example_token_exposed(settings):
    # The forms below refer to ${EXAMPLE_TOKEN}: a variable the operator exposes to servers.
    settings.PORTAL_SERVER_VARIABLES = ["EXAMPLE_TOKEN"]


def remote_form(team, **overrides):
    data = {
        "team": team.pk,
        "name": "remote",
        "transport": "websocket",
        "url": "wss://mcp.example.com/socket",
        "headers": "Authorization: Bearer ${EXAMPLE_TOKEN}\nX-Tenant: ${TENANT:-acme}",
        "request_timeout": "120",
        "reset_timeout_on_progress": "on",
        "protocol": "legacy",
        "shared": "on",
        "enabled": "on",
    }
    data.update(overrides)
    return data


def test_it_registers_a_websocket_server_with_variables_and_settings(alice):
    team = alice.memberships.get().team
    response = logged_in(alice).post("/servers/add/", remote_form(team))
    server = Server.objects.get()
    assert response.status_code == 302
    assert (server.transport, server.url, server.protocol) == ("websocket", "wss://mcp.example.com/socket", "legacy")
    assert server.headers == {"Authorization": "Bearer ${EXAMPLE_TOKEN}", "X-Tenant": "${TENANT:-acme}"}
    assert server.shared and server.reset_timeout_on_progress
    config = server.to_config()
    assert config.headers["Authorization"] == "Bearer ${EXAMPLE_TOKEN}"  # stored and keyed unexpanded
    assert server.connection_owner(alice.pk) == f"team:{team.pk}"


@pytest.mark.parametrize(
    "transport,url,message",
    [
        ("websocket", "https://mcp.example.com/", "Enter a valid ws:// or wss:// URL."),
        ("sse", "ws://mcp.example.com/sse", "Enter a valid http:// or https:// URL."),
        ("sse", "", "Enter the server's URL."),
        ("http", "https://${HOST/mcp", "Write variables as ${NAME}, ${NAME:-default} or ${secret:NAME}."),
    ],
)
def test_urls_must_fit_the_transport(alice, transport, url, message):
    team = alice.memberships.get().team
    response = logged_in(alice).post("/servers/add/", remote_form(team, transport=transport, url=url))
    assert message in html.unescape(response.content.decode()) and not Server.objects.exists()


def test_sse_and_variables_in_urls_are_accepted(alice):
    team = alice.memberships.get().team
    response = logged_in(alice).post(
        "/servers/add/", remote_form(team, transport="sse", url="https://${MCP_HOST:-localhost}:8443/sse")
    )
    assert response.status_code == 302 and Server.objects.get().url == "https://${MCP_HOST:-localhost}:8443/sse"


def test_the_pages_show_each_users_own_connection_status(alice, bob, demo_server):
    ConnectionStatus.objects.create(server=demo_server, owner=f"user:{alice.pk}", status="failed", error="refused")
    alice_page = logged_in(alice).get("/servers/").content.decode()
    bob_page = logged_in(bob).get(f"/servers/{demo_server.pk}/").content.decode()
    assert 'class="badge connection-failed" title="refused">failed</span>' in alice_page
    assert "not connected" in bob_page and "connection-failed" not in bob_page
    demo_server.enabled = False
    demo_server.save()
    assert '<span class="badge off">disabled</span></span>' in logged_in(alice).get("/servers/").content.decode()


def test_summaries_in_lists_and_the_full_description_for_the_tool_pane(alice, demo_server):
    long = "x" * (MAX_DESCRIPTION_LENGTH + 500)
    demo_server.tools = [{"name": "big", "description": long, "inputSchema": {"type": "object"}}]
    demo_server.save()
    client = logged_in(alice)
    detail = client.get(f"/servers/{demo_server.pk}/").content.decode()
    assert "x" * MAX_DESCRIPTION_LENGTH + TRUNCATED_SUFFIX in detail and long not in detail
    playground = client.get("/playground/").context["catalog"]
    (tool,) = playground[0]["tools"]
    assert tool["summary"] == "x" * MAX_DESCRIPTION_LENGTH + TRUNCATED_SUFFIX
    assert tool["description"] == long  # for the tool pane


def test_tool_names_are_valid_unique_and_stable():
    tools = ["search", "get.item", "get item", "get_item", "a" * 80]
    names = full_tool_names("my server", tools)
    assert names["search"] == "mcp__my_server__search"
    assert names["get_item"] == "mcp__my_server__get_item"  # needed no change: keeps the plain name
    assert names["get.item"] != names["get item"] and len(set(names.values())) == len(tools)
    assert all(len(name) <= 64 and name.replace("_", "").replace("-", "").isalnum() for name in names.values())
    assert full_tool_names("my server", list(reversed(tools))) == names
    assert full_tool_names("my server", ["get.item"])["get.item"] == "mcp__my_server__get_item"
