"""Registering servers in the web UI: admins change, members look, other teams see nothing."""

from __future__ import annotations

import sys

import pytest

from servers.models import Server
from tests.conftest import DEMO_ARGS, ROOT
from tests.helpers import logged_in

pytestmark = pytest.mark.django_db


def stdio_form(team, **overrides):
    data = {
        "team": team.pk,
        "name": "demo",
        "description": "the demo",
        "transport": "stdio",
        "command": sys.executable,
        "args": "\n".join(DEMO_ARGS),
        "env": "DEMO_MODE=1\n# a comment\nEMPTY=",
        "cwd": str(ROOT),
        "url": "",
        "headers": "",
        "request_timeout": "30",
        "enabled": "on",
    }
    data.update(overrides)
    return data


def test_it_registers_a_stdio_server(alice):
    team = alice.memberships.get().team
    response = logged_in(alice).post("/servers/add/", stdio_form(team))
    server = Server.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/servers/{server.pk}/"
    assert (server.team, server.created_by, server.transport) == (team, alice, "stdio")
    assert server.args == DEMO_ARGS
    assert server.env == {"DEMO_MODE": "1", "EMPTY": ""}
    assert server.request_timeout == 30 and server.enabled
    assert server.roots == [] and server.elicitation_timeout is None


def test_it_keeps_roots_and_the_time_to_answer_a_form(alice):
    team = alice.memberships.get().team
    form = stdio_form(team, roots="file:///srv/a\n\n file:///srv/b/ ", elicitation_timeout="90")
    logged_in(alice).post("/servers/add/", form)
    server = Server.objects.get()
    assert server.roots == ["file:///srv/a", "file:///srv/b/"]
    assert server.seconds_to_answer == 90
    page = logged_in(alice).get(f"/servers/{server.pk}/")
    assert b"<code>file:///srv/a</code>" in page.content


def test_it_registers_a_streamable_http_server_with_headers(alice):
    team = alice.memberships.get().team
    form = stdio_form(
        team,
        name="remote",
        transport="http",
        url="https://mcp.example.com/mcp",
        headers="X-Api-Version: 2\nAccept-Language: en",
        command="",
        args="",
    )
    logged_in(alice).post("/servers/add/", form)
    server = Server.objects.get()
    assert server.url == "https://mcp.example.com/mcp"
    assert server.headers == {"X-Api-Version": "2", "Accept-Language": "en"}
    assert server.command == "" and server.env == {}


@pytest.mark.parametrize(
    "overrides, field, message",
    [
        ({"command": "  "}, "command", "Enter the command that starts the server."),
        ({"transport": "http", "url": "not a url"}, "url", "Enter a valid http:// or https:// URL."),
        ({"transport": "http", "url": "ftp://example.com/mcp"}, "url", "Enter a valid http:// or https:// URL."),
        ({"transport": "http", "url": ""}, "url", "Enter the server's URL."),
        ({"name": "x" * 65}, "name", "Ensure this value has at most 64 characters (it has 65)."),
        ({"env": "not-a-pair"}, "env", "Line 1: write each environment variable as NAME=value."),
        ({"env": "1BAD=x"}, "env", "Line 1: '1BAD' is not a valid environment variable name."),
        (
            {"transport": "http", "url": "https://x.example/mcp", "headers": "Bad Header: x"},
            "headers",
            "Line 1: 'Bad Header' is not a valid header name.",
        ),
        ({"request_timeout": "0"}, "request_timeout", "Ensure this value is greater than or equal to 1."),
        ({"roots": "/home/me"}, "roots", "'/home/me' is not a file:// URI (file:///home/me/project)."),
        (
            {"roots": "https://x.example/"},
            "roots",
            "'https://x.example/' is not a file:// URI (file:///home/me/project).",
        ),
        ({"elicitation_timeout": "0"}, "elicitation_timeout", "Ensure this value is greater than or equal to 1."),
    ],
)
def test_it_explains_what_is_wrong(alice, overrides, field, message):
    team = alice.memberships.get().team
    response = logged_in(alice).post("/servers/add/", stdio_form(team, **overrides))
    assert response.status_code == 200
    assert message in response.context["form"].errors[field]
    assert not Server.objects.exists()


def test_a_name_that_normalizes_to_an_existing_one_is_a_duplicate(alice, demo_server):
    team = alice.memberships.get().team
    response = logged_in(alice).post("/servers/add/", stdio_form(team, name="DEMO"))
    assert response.context["form"].errors["name"] == [
        "'DEMO' clashes with the team's server 'demo': in tool names both become mcp__demo__… "
        "(other characters become _, case aside). Choose another name."
    ]
    response = logged_in(alice).post("/servers/add/", stdio_form(team, name="demo"))
    assert response.context["form"].errors["name"] == ["The team already has a server named 'demo'."]
    response = logged_in(alice).post("/servers/add/", stdio_form(team, name="my server"))
    assert response.status_code == 302  # spaces normalize to _: a valid, distinct name
    response = logged_in(alice).post("/servers/add/", stdio_form(team, name="my.server"))
    assert "clashes with the team's server 'my server'" in response.context["form"].errors["name"][0]
    # The help text says what normalizing does.
    assert "any other character becomes _" in logged_in(alice).get("/servers/add/").content.decode()


def test_it_edits_a_server_and_forgets_the_old_tool_list(alice, demo_server):
    demo_server.tools = [{"name": "echo"}]
    demo_server.save()
    client = logged_in(alice)
    page = client.get(f"/servers/{demo_server.pk}/edit/")
    assert page.context["form"].initial["args"] == "\n".join(DEMO_ARGS)
    form = stdio_form(demo_server.team, args="-m\nsessions.mcp.demo_server\nstdio")
    client.post(f"/servers/{demo_server.pk}/edit/", form)
    demo_server.refresh_from_db()
    assert demo_server.args == [*DEMO_ARGS, "stdio"] and demo_server.tools == []


def test_it_disables_enables_and_deletes(alice, demo_server):
    client = logged_in(alice)
    client.post(f"/servers/{demo_server.pk}/toggle/")
    demo_server.refresh_from_db()
    assert not demo_server.enabled
    # Back to the page the admin came from, but never to another site.
    went = client.post(f"/servers/{demo_server.pk}/toggle/", {"next": "https://evil.example/"})
    demo_server.refresh_from_db()
    assert demo_server.enabled
    assert went.status_code == 302 and went["Location"] == "/servers/"
    back = client.post(f"/servers/{demo_server.pk}/toggle/", {"next": f"/servers/{demo_server.pk}/"})
    assert back["Location"] == f"/servers/{demo_server.pk}/"
    client.post(f"/servers/{demo_server.pk}/toggle/")
    assert client.get(f"/servers/{demo_server.pk}/delete/").status_code == 200
    assert client.post(f"/servers/{demo_server.pk}/delete/")["Location"] == "/servers/"
    assert not Server.objects.exists()


def test_members_see_servers_read_only(bob, demo_server):
    client = logged_in(bob)
    listing = client.get("/servers/")
    assert demo_server in listing.context["servers"] and not listing.context["can_add"]
    assert b"Edit</a>" not in listing.content
    assert client.get(f"/servers/{demo_server.pk}/").status_code == 200
    assert client.get("/servers/add/").status_code == 403
    assert client.get(f"/servers/{demo_server.pk}/edit/").status_code == 403
    assert client.post(f"/servers/{demo_server.pk}/toggle/").status_code == 403
    assert client.post(f"/servers/{demo_server.pk}/delete/").status_code == 403
    assert Server.objects.get().enabled


def test_other_teams_cannot_see_or_touch_the_server(carol, demo_server):
    client = logged_in(carol)
    assert list(client.get("/servers/").context["servers"]) == []
    for url in ["/", "edit/", "delete/"]:
        assert client.get(f"/servers/{demo_server.pk}/{url.strip('/')}/".replace("//", "/")).status_code == 404
    assert client.post(f"/servers/{demo_server.pk}/toggle/").status_code == 404
    # Nor can she register one into Acme by naming its team.
    response = client.post("/servers/add/", stdio_form(demo_server.team, name="sneaky"))
    assert "team" in response.context["form"].errors
    assert Server.objects.count() == 1


def test_anonymous_users_are_sent_to_log_in(client, demo_server):
    for url in ["/servers/", f"/servers/{demo_server.pk}/", "/playground/", "/calls/"]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_playground_lists_enabled_servers_with_their_tools(bob, demo_server, carol):
    demo_server.tools = [{"name": "echo", "inputSchema": {"type": "object"}}]
    demo_server.save()
    page = logged_in(bob).get("/playground/")
    assert [s["name"] for s in page.context["catalog"]] == ["demo"]
    assert page.context["catalog"][0]["prefix"] == "mcp__demo__"
    assert logged_in(carol).get("/playground/").context["catalog"] == []


def test_pages_carry_security_headers(alice):
    response = logged_in(alice).get("/servers/")
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"


def test_the_page_names_the_tools_agents_see_under_a_shortened_name_on_the_endpoint(bob, demo_server):
    long_name = "search_" + "x" * 53  # 60 characters: `demo__` and a client's `mcp__portal__` pass 64
    demo_server.tools = [
        {"name": "echo", "inputSchema": {"type": "object"}},
        {"name": long_name, "inputSchema": {"type": "object"}},
    ]
    demo_server.save()
    page = logged_in(bob).get(f"/servers/{demo_server.pk}/")
    (cut,) = page.context["cut"]
    assert cut["tool"] == long_name and cut["endpoint_name"].startswith("demo__search_xxx")
    assert len("mcp__portal__" + cut["endpoint_name"]) == 64
    html = page.content.decode()
    assert 'id="endpoint-names-cut"' in html and "under a shortened name" in html
    assert f"<code>{long_name}</code> is <code>{cut['endpoint_name']}</code> on <code>/mcp/</code>" in html
    assert "On <code>/mcp/demo/</code> it keeps its own name." in html

    demo_server.tools = demo_server.tools[:1]
    demo_server.save()
    page = logged_in(bob).get(f"/servers/{demo_server.pk}/")
    assert page.context["cut"] == [] and b"endpoint-names-cut" not in page.content
