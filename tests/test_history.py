"""The history: filters, one call in full (arguments, progress, result, errors, JSON-RPC), re-run, JSON export."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from django.utils import timezone

from sessions.access_tokens import do_create_token
from sessions.models import ToolCall
from tests.helpers import logged_in
from tests.ws import Playground, session_cookie


def record(user, server, tool="echo", status="succeeded", **fields):
    now = timezone.now()
    return ToolCall.objects.create(
        user=user,
        server=server,
        server_name=server.name if server else "",
        tool=tool,
        status=status,
        arguments=fields.pop("arguments", {"message": "hi"}),
        started_at=now,
        finished_at=now,
        duration_ms=fields.pop("duration_ms", 12.5),
        **fields,
    )


def selected_of(response) -> dict:
    match = re.search(r'<script id="selected" type="application/json">(.*?)</script>', response.content.decode())
    return json.loads(match.group(1))


@pytest.mark.django_db
def test_filters_narrow_the_list_to_ones_own_calls(alice, bob, demo_server):
    from servers.models import Server

    other = Server.objects.create(team=demo_server.team, name="other", command="true")
    mine = [
        record(alice, demo_server, "echo"),
        record(alice, demo_server, "add", status="tool_error"),
        record(alice, other, "echo", status="failed", error="boom", error_kind="process_exited"),
    ]
    record(bob, demo_server, "echo")  # Bob's, never on Alice's page
    client = logged_in(alice)

    def shown(query=""):
        return [str(call.pk) for call in client.get(f"/calls/{query}").context["calls"]]

    assert sorted(shown()) == sorted(str(c.pk) for c in mine)
    assert shown("?server=demo") == [str(mine[1].pk), str(mine[0].pk)]
    assert shown("?tool=echo&status=failed") == [str(mine[2].pk)]
    assert shown("?status=cancelled") == []
    page = client.get("/calls/?server=other").content.decode()
    assert "boom" in page and f"/playground/?call={mine[2].pk}" in page
    assert 'href="/calls/export.json?server=other"' in page


@pytest.mark.django_db
def test_one_call_shows_arguments_result_progress_errors_and_json_rpc(alice, bob, demo_server):
    call = record(
        alice,
        demo_server,
        "count",
        arguments={"steps": 2},
        result={"content": [{"type": "text", "text": "counted to 2"}], "structuredContent": None, "isError": False},
        details={
            "progress": [
                {"progress": 1, "total": 2, "message": "step 1 of 2", "at_ms": 10.0},
                {"progress": 2, "total": 2, "message": "step 2 of 2", "at_ms": 20.0},
            ]
        },
    )
    page = logged_in(alice).get(f"/calls/{call.pk}/").content.decode()
    assert "&quot;steps&quot;: 2" in page and "counted to 2" in page
    assert "step 1 of 2" in page and "10.0 ms" in page
    assert "notifications/progress" in page and "tools/call" in page
    assert f'href="/playground/?call={call.pk}"' in page
    assert logged_in(bob).get(f"/calls/{call.pk}/").status_code == 404
    exchange = call.exchange()
    assert [m["direction"] for m in exchange] == ["sent", "received", "received", "received"]
    assert exchange[0]["message"]["params"] == {"name": "count", "arguments": {"steps": 2}}
    assert exchange[-1]["at_ms"] == 12.5 and exchange[-1]["message"]["result"]["content"][0]["text"] == "counted to 2"


@pytest.mark.django_db
def test_a_failed_call_shows_its_errors_and_ends_its_exchange_with_the_portals_verdict(alice, demo_server):
    call = record(
        alice,
        demo_server,
        "add",
        status="timed_out",
        error="no answer from the server within 1 s",
        error_kind="timeout",
        details={"stderr_tail": "Traceback: oops"},
    )
    rejected = record(
        alice,
        demo_server,
        "add",
        status="rejected",
        error="The arguments do not match the tool's schema.",
        error_kind="invalid_arguments",
        details={"errors": [{"path": ["a"], "message": "'two' is not of type 'number'"}]},
    )
    page = logged_in(alice).get(f"/calls/{call.pk}/").content.decode()
    assert "no answer from the server within 1 s" in page and "Traceback: oops" in page
    assert call.exchange()[-1] == {
        "at_ms": 12.5,
        "direction": "portal",
        "message": {"status": "timed_out", "error_kind": "timeout", "error": "no answer from the server within 1 s"},
    }
    rejected_page = logged_in(alice).get(f"/calls/{rejected.pk}/").content.decode()
    assert "is not of type" in rejected_page and "JSON-RPC with timings" not in rejected_page
    assert rejected.exchange() == []


@pytest.mark.django_db
def test_re_run_prefills_the_playground_with_ones_own_calls_only(alice, carol, demo_server):
    call = record(alice, demo_server, "add", arguments={"a": 2, "b": 3})
    assert selected_of(logged_in(alice).get(f"/playground/?call={call.pk}")) == {
        "server": str(demo_server.pk),
        "tool": "add",
        "arguments": {"a": 2, "b": 3},
    }
    # Someone else's call id, a malformed one: nothing is prefilled.
    assert "arguments" not in selected_of(logged_in(carol).get(f"/playground/?call={call.pk}"))
    assert selected_of(logged_in(alice).get("/playground/?call=not-a-uuid&tool=echo")) == {"server": "", "tool": "echo"}


@pytest.mark.django_db
def test_export_one_call_or_the_filtered_list_as_json(alice, bob, demo_server):
    echo = record(alice, demo_server, "echo")
    record(alice, demo_server, "add", status="failed")
    record(bob, demo_server, "echo")
    client = logged_in(alice)
    one = client.get(f"/calls/{echo.pk}/export.json")
    assert one["Content-Disposition"] == f'attachment; filename="mcp-call-{echo.pk}.json"'
    body = json.loads(one.content)
    assert body["call"] == str(echo.pk) and body["arguments"] == {"message": "hi"} and body["exchange"]
    listed = json.loads(client.get("/calls/export.json?tool=echo").content)
    assert listed["filters"] == {"server": "", "tool": "echo", "status": "", "via": ""}
    assert [c["call"] for c in listed["calls"]] == [str(echo.pk)]
    assert len(json.loads(client.get("/calls/export.json").content)["calls"]) == 2
    assert logged_in(bob).get(f"/calls/{echo.pk}/export.json").status_code == 404


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("worker")
def test_a_real_calls_progress_is_kept_on_its_record(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "count", {"steps": 3, "delay": 0.01})

    ended = asyncio.run(scenario())
    call = ToolCall.objects.get(pk=ended["call"])
    progress = call.details["progress"]
    assert [(p["progress"], p["total"], p["message"]) for p in progress] == [
        (1, 3, "step 1 of 3"),
        (2, 3, "step 2 of 3"),
        (3, 3, "step 3 of 3"),
    ]
    assert progress[0]["at_ms"] <= progress[1]["at_ms"] <= progress[2]["at_ms"]
    assert [m["message"].get("method") for m in call.exchange()] == [
        "tools/call",
        "notifications/progress",
        "notifications/progress",
        "notifications/progress",
        None,
    ]


PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


@pytest.mark.django_db
def test_one_call_shows_images_as_images_text_as_written_times_with_their_zone_and_the_cut(alice, demo_server):
    call = record(
        alice,
        demo_server,
        "image",
        result={
            "content": [
                {"type": "text", "text": "Done ✅ <b>not bold</b>"},
                {"type": "image", "mimeType": "image/png", "data": PNG},
                {"type": "image", "mimeType": "image/svg+xml", "data": "PHN2Zz48L3N2Zz4="},
            ],
            "structuredContent": None,
            "isError": False,
        },
        details={
            "truncated": {
                "tokens": 2_527_497,
                "limit": 25_000,
                "full_bytes": 10_109_988,
                "kept_bytes": 10_109_988,
                "notice": "The tool returned about 2,527,497 tokens (10.1 MB), over the 25,000-token limit: "
                "the first 25,000 tokens are shown, and the whole output (10.1 MB) can be downloaded.",
            }
        },
    )
    page = logged_in(alice).get(f"/calls/{call.pk}/").content.decode()
    assert "Done ✅ &lt;b&gt;not bold&lt;/b&gt;" in page and "\\u2705" not in page
    assert f'<img class="result-image" src="data:image/png;base64,{PNG}"' in page
    assert "data:image/svg+xml" not in page, "an SVG (which may carry script) is shown as JSON, not as an image"
    assert re.search(r"<dt>Started</dt><dd>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC</dd>", page)
    assert (
        "(10.1 MB) can be downloaded." in page
        and f'href="/calls/{call.pk}/full-output">Download the full output' in page
    )
    assert page.count("2,527,497") == 1, "one notice, not a second one in the details"


def agent_call(user, server, client="claude-code 2.1", token_name="", **fields):
    """A call that came from an agent through the MCP endpoint, with a personal access token if named."""
    token = do_create_token(user, token_name)[0] if token_name else None
    return record(user, server, via="mcp", client=client, access_token=token, **fields)


@pytest.mark.django_db
def test_it_filters_by_where_calls_came_from_and_says_so(alice, bob, carol, demo_server):
    played = record(alice, demo_server, "echo")
    agent = agent_call(alice, demo_server, token_name="laptop")
    oauth = agent_call(alice, demo_server, client="Cursor 1.7")  # signed in with OAuth: no token
    agent_call(bob, demo_server, client="bob's agent", token_name="bob's token")
    client = logged_in(alice)

    def shown(query=""):
        return [str(call.pk) for call in client.get(f"/calls/{query}").context["calls"]]

    assert shown("?via=mcp") == [str(oauth.pk), str(agent.pk)]
    assert shown("?via=playground") == [str(played.pk)]
    assert sorted(shown("?via=")) == sorted(str(c.pk) for c in (played, agent, oauth))
    page = client.get("/calls/?via=mcp").content.decode()
    assert '<option value="mcp" selected>Agents (MCP endpoint)</option>' in page
    assert "claude-code 2.1" in page and "the token “laptop”" in page and "Cursor 1.7" in page
    assert "bob" not in page, "another person's calls, clients and tokens are never shown"
    assert 'href="/calls/export.json?via=mcp"' in page
    detail = client.get(f"/calls/{agent.pk}/").content.decode()
    assert re.search(r"<dt>Came from</dt><dd[^>]*>.*Agent \(MCP endpoint\).*claude-code 2\.1.*“laptop”", detail)
    assert "Playground" in client.get(f"/calls/{played.pk}/").content.decode()

    exported = json.loads(client.get("/calls/export.json?via=mcp").content)
    assert exported["filters"]["via"] == "mcp"
    assert [(c["call"], c["client"], c["access_token"]) for c in exported["calls"]] == [
        (str(oauth.pk), "Cursor 1.7", None),
        (str(agent.pk), "claude-code 2.1", "laptop"),
    ]
    assert "digest" not in json.dumps(exported) and agent.access_token.prefix not in json.dumps(exported)

    # A value that is no way of coming (a hand-edited link) filters nothing and says so; never a 500.
    for bogus in ("carrier-pigeon", "<b>x</b>", "MCP"):
        response = client.get("/calls/", {"via": bogus})
        assert response.status_code == 200 and len(response.context["calls"]) == 3
        assert 'id="ignored-via"' in response.content.decode()
        export = client.get("/calls/export.json", {"via": bogus})
        assert export.status_code == 200 and len(json.loads(export.content)["calls"]) == 3
    assert "&lt;b&gt;x&lt;/b&gt;" in client.get("/calls/", {"via": "<b>x</b>"}).content.decode()
    # Another team's person sees none of it, whatever the filter.
    assert [c.pk for c in logged_in(carol).get("/calls/?via=mcp").context["calls"]] == []
    assert logged_in(carol).get(f"/calls/{agent.pk}/").status_code == 404


HOSTILE = '<script>alert("pwned")</script>'


@pytest.mark.django_db
def test_a_hostile_client_name_and_token_name_are_shown_escaped(alice, demo_server):
    call = agent_call(alice, demo_server, client=HOSTILE + " 1.0", token_name='"><img src=x onerror=alert(1)>')
    client = logged_in(alice)
    for page in (client.get("/calls/").content.decode(), client.get(f"/calls/{call.pk}/").content.decode()):
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "&lt;script&gt;alert(&quot;pwned&quot;)&lt;/script&gt;" in page
        assert "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.django_db
def test_the_history_costs_the_same_queries_for_one_agent_call_or_many(alice, demo_server):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client = logged_in(alice)
    agent_call(alice, demo_server, token_name="token 0")

    def statements() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/calls/").status_code == 200
        return len(queries)

    one = statements()
    for n in range(1, 6):
        agent_call(alice, demo_server, client=f"client {n}", token_name=f"token {n}")
    assert statements() == one
