"""A tool call from the playground's WebSocket through a real worker to the real demo server and back."""

from __future__ import annotations

import pytest

from sessions.models import ToolCall
from tests.ws import Playground, run, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def test_it_calls_echo_and_records_the_call(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            assert ws.connected
            return await ws.call(demo_server.pk, "echo", {"message": "hello portal"}), ws.seen

    ended, seen = run(scenario())
    assert ended["status"] == "succeeded", ended
    assert ended["result"]["content"] == [{"type": "text", "text": "hello portal"}]
    assert [e["type"] for e in seen if e["type"].startswith("call.")][-2:] == ["call.started", "call.ended"]
    call = ToolCall.objects.get(pk=ended["call"])
    assert (call.user, call.server, call.tool, call.status) == (alice, demo_server, "echo", "succeeded")
    assert call.arguments == {"message": "hello portal"}
    assert call.duration_ms > 0 and call.finished_at is not None


def test_it_streams_progress_before_the_result(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(demo_server.pk, "count", {"steps": 3, "delay": 0.05})
            return ended, [e for e in ws.seen if e["type"] == "call.progress"]

    ended, progress = run(scenario())
    assert ended["status"] == "succeeded"
    assert [(p["progress"], p["total"]) for p in progress] == [(1, 3), (2, 3), (3, 3)]
    assert progress[0]["message"] == "step 1 of 3"


def test_it_returns_images_and_structured_content(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "image", {"colour": "red", "size": 8}), await ws.call(
                demo_server.pk, "add", {"a": 2, "b": 3.5}
            )

    image, added = run(scenario())
    blocks = image["result"]["content"]
    assert blocks[1]["type"] == "image" and blocks[1]["mimeType"] == "image/png"
    assert blocks[1]["data"].startswith("iVBORw0KGgo")  # a PNG signature, base64
    assert added["result"]["structuredContent"] == {"sum": 5.5}


def test_it_reuses_one_connection_per_server_and_user(alice, bob, demo_server):
    alice_cookie, bob_cookie = session_cookie(alice), session_cookie(bob)

    async def server_process(ws: Playground) -> int:
        # spawn names the stdio server process that ran it (it is not read-only: approved once). Its
        # token, not its pid: in the sandbox every server is pid 2 of a namespace of its own.
        ended = await ws.call(demo_server.pk, "spawn", {}, approve="allow_once")
        assert ended["status"] == "succeeded", ended
        return ended["result"]["structuredContent"]["server_process"]

    async def scenario():
        async with Playground(alice_cookie) as ws:
            first, second = await server_process(ws), await server_process(ws)
        async with Playground(alice_cookie) as ws:  # a reloaded page
            third = await server_process(ws)
        async with Playground(bob_cookie) as ws:
            bobs = await server_process(ws)
        return first, second, third, bobs

    first, second, third, bobs = run(scenario())
    # One server process serves all of alice's calls, from one page or the next; bob has his own.
    assert first == second == third
    assert bobs != first


def test_it_reports_a_tool_error_as_a_tool_error(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "fail", {"reason": "no such row"})

    ended = run(scenario())
    assert ended["status"] == "tool_error"
    assert ended["result"]["isError"] is True
    assert "no such row" in ended["result"]["content"][0]["text"]


def test_arguments_that_fail_the_schema_are_rejected_per_field(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "add", {"a": "two"})

    ended = run(scenario())
    assert ended["status"] == "rejected" and ended["error_kind"] == "invalid_arguments"
    errors = {tuple(e["path"]): e["message"] for e in ended["details"]["errors"]}
    assert errors[("a",)] == "'two' is not of type 'number'"
    assert errors[("b",)] == "'b' is a required property"
    assert ToolCall.objects.get(pk=ended["call"]).status == "rejected"


def test_an_unknown_tool_or_server_is_rejected_and_recorded(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "no_such_tool"), await ws.call(999999, "echo")

    tool, server = run(scenario())
    assert (tool["status"], tool["error_kind"]) == ("rejected", "unknown_tool")
    assert (server["status"], server["error_kind"]) == ("rejected", "unknown_server")
    assert ToolCall.objects.filter(status="rejected").count() == 2


def test_a_server_that_crashes_mid_call_fails_the_call_and_the_next_call_reconnects(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            # crash is destructive: the default policy asks first.
            crashed = await ws.call(demo_server.pk, "crash", approve="allow_once")
            return crashed, await ws.call(demo_server.pk, "echo", {"message": "back"})

    crashed, after = run(scenario())
    assert crashed["status"] == "failed" and crashed["error_kind"] == "process_exited"
    assert "crashing on request" in crashed["error"]
    assert "crashing on request" in crashed["details"]["stderr_tail"]
    assert after["status"] == "succeeded"


def test_a_server_that_never_answers_times_out_with_a_record(alice, demo_server):
    demo_server.request_timeout = 1
    demo_server.save()
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "sleep", {"seconds": 30})

    ended = run(scenario())
    assert ended["status"] == "timed_out" and ended["error_kind"] == "timeout"
    assert "within 1 s" in ended["error"]
    assert ToolCall.objects.get(pk=ended["call"]).status == "timed_out"


def test_a_disabled_server_cannot_be_called(alice, demo_server):
    demo_server.enabled = False
    demo_server.save()
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(demo_server.pk, "echo", {"message": "x"})

    ended = run(scenario())
    assert (ended["status"], ended["error_kind"]) == ("rejected", "server_disabled")


def test_a_user_of_another_team_can_neither_see_nor_call_the_server(carol, demo_server):
    cookie = session_cookie(carol)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(demo_server.pk, "echo", {"message": "let me in"})
            await ws.send({"type": "list_tools", "server": demo_server.pk})
            listed = await ws.until("error")
            await ws.send({"type": "test_connection", "server": demo_server.pk})
            tested = await ws.until("error")
            return ended, listed, tested

    ended, listed, tested = run(scenario())
    assert (ended["status"], ended["error_kind"]) == ("rejected", "unknown_server")
    assert ended["result"] is None
    assert listed["message"] == "Unknown server."
    assert "admins" in tested["message"]
    # Carol's attempt is on record as hers, and names no server of Acme's.
    call = ToolCall.objects.get(pk=ended["call"])
    assert call.user == carol and call.server is None and call.server_name == ""


def test_malformed_messages_get_clear_errors_and_the_socket_stays_open(alice, demo_server):
    cookie = session_cookie(alice)
    bad = [
        "not json",
        "[1, 2]",
        {"no": "type"},
        {"type": "launch_missiles"},
        {"type": "call", "server": "1", "tool": "echo"},
        {"type": "call", "server": True, "tool": "echo"},
        {"type": "call", "server": demo_server.pk, "tool": ""},
        {"type": "call", "server": demo_server.pk, "tool": "echo", "arguments": [1]},
        {"type": "list_tools", "server": None},
        # JSON Python reads but the databases' JSON columns refuse: NaN, a NUL, a lone surrogate.
        f'{{"type": "call", "server": {demo_server.pk}, "tool": "echo", "arguments": {{"message": NaN}}}}',
        f'{{"type": "call", "server": {demo_server.pk}, "tool": "echo", "arguments": {{"message": "a\\u0000b"}}}}',
        f'{{"type": "call", "server": {demo_server.pk}, "tool": "echo", "arguments": {{"message": "\\ud800"}}}}',
    ]

    async def scenario():
        async with Playground(cookie) as ws:
            errors = []
            for message in bad:
                await ws.send(message)
                errors.append(await ws.until("error"))
            ended = await ws.call(demo_server.pk, "echo", {"message": "still here"})
            return errors, ended

    errors, ended = run(scenario())
    assert len(errors) == len(bad)
    assert errors[0]["message"] == "The message is not valid JSON."
    assert "Unknown message type" in errors[3]["message"]
    assert [e["message"] for e in errors[-3:]] == [
        "The message is not valid JSON.",
        "The message contains a NUL character, which is not stored.",
        "The message is not valid JSON.",
    ]
    assert ended["status"] == "succeeded"
    assert ToolCall.objects.count() == 1


def test_anonymous_and_cross_origin_sockets_are_refused(alice):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(None) as anonymous:
            # Accepted and closed at once with 4401, which the page reads as "log in again".
            closed = await anonymous.communicator.receive_output(timeout=10)
        async with Playground(cookie, origin=b"http://evil.example") as cross:
            pass
        return closed, cross

    closed, cross = run(scenario())
    assert closed == {"type": "websocket.close", "code": 4401}
    assert not cross.connected


def test_list_tools_and_test_connection_reach_the_worker_and_are_saved(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send({"type": "list_tools", "server": demo_server.pk, "refresh": True})
            tools = await ws.until("tools", server=demo_server.pk)
            await ws.send({"type": "test_connection", "server": demo_server.pk})
            tested = await ws.until("connection.tested", server=demo_server.pk)
            return tools, tested

    tools, tested = run(scenario())
    names = {t["name"] for t in tools["tools"]}
    assert {"echo", "add", "count", "image", "ask", "sleep"} <= names
    assert tested["ok"] is True
    assert tested["server_name"] == "portal-demo" and tested["server_version"] == "1.0.0"
    assert tested["protocol_version"] and tested["tool_count"] == len(names)
    assert "tools" in tested["capabilities"] and tested["handshake_ms"] > 0
    demo_server.refresh_from_db()
    assert demo_server.last_test["ok"] is True and len(demo_server.tools) == len(names)
