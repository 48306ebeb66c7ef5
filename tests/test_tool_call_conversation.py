"""A call is a conversation: Cancel, elicitation forms, server logs and truncation, over the WebSocket
through a real worker to the real demo server, in both protocol eras."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sessions.models import Elicitation, SamplingRequest, ToolCall
from tests.ws import Playground, run, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


@pytest.fixture(params=["auto", "legacy"])
def era_server(request, demo_server, tmp_path):
    """The demo server, in the 2026 era (auto negotiates it) or forced into the handshake era."""
    demo_server.protocol = request.param
    demo_server.env = {"DEMO_EVENT_LOG": str(tmp_path / "events")}
    demo_server.save()
    return demo_server


async def _start(ws: Playground, server: int, tool: str, arguments: dict) -> str:
    await ws.send({"type": "call", "ref": "c", "server": server, "tool": tool, "arguments": arguments})
    return (await ws.until("call.accepted", ref="c"))["call"]


def test_it_cancels_a_running_call_and_the_session_stays_usable(alice, era_server):
    cookie = session_cookie(alice)
    events = Path(era_server.env["DEMO_EVENT_LOG"])

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, era_server.pk, "sleep", {"seconds": 30})
            # Once the server says it is sleeping, the request has surely reached it.
            await ws.until("call.log", call=call, data="sleeping 30 s")
            while True:
                await ws.send({"type": "cancel_call", "ref": "x", "call": call})
                reply = await ws.until_any({"cancel.sent", "error"}, ref="x")
                if reply["type"] == "cancel.sent":
                    break
                assert "starting" in reply["message"], reply
            ended = await ws.until("call.ended", call=call)
            after = await ws.call(era_server.pk, "echo", {"message": "still here"})
            return ended, after

    ended, after = run(scenario())
    assert ended["status"] == "cancelled", ended
    assert ended["error_kind"] == "cancelled"
    assert after["status"] == "succeeded"
    assert ToolCall.objects.get(pk=ended["call"]).status == "cancelled"
    assert _eventually(lambda: events.exists() and "sleep cancelled" in events.read_text())


def _eventually(condition, timeout: float = 10) -> bool:
    """The server hears the cancellation on its own schedule, maybe after the next call returned."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_it_refuses_to_cancel_someone_elses_or_a_finished_call(alice, bob, demo_server):
    alice_cookie, bob_cookie = session_cookie(alice), session_cookie(bob)

    async def scenario():
        async with Playground(alice_cookie) as ws:
            done = await ws.call(demo_server.pk, "echo", {"message": "x"})
            await ws.send({"type": "cancel_call", "ref": "f", "call": done["call"]})
            finished = await ws.until("error", ref="f")
        async with Playground(bob_cookie) as ws:
            await ws.send({"type": "cancel_call", "ref": "b", "call": done["call"]})
            other = await ws.until("error", ref="b")
            await ws.send({"type": "cancel_call", "ref": "n", "call": "not-an-id"})
            nonsense = await ws.until("error", ref="n")
        return finished, other, nonsense

    finished, other, nonsense = run(scenario())
    assert "not running" in finished["message"]
    assert other["message"] == nonsense["message"] == "Unknown call."


def test_it_asks_the_user_and_sends_back_a_corrected_answer(alice, era_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, era_server.pk, "ask", {"topic": "the portal"})
            asked = await ws.until("elicitation.requested", call=call)
            eid = asked["elicitation"]
            bad = {"name": "Ada", "email": "not an email", "subscribe": True}
            await ws.send(
                {"type": "answer_elicitation", "ref": "a1", "elicitation": eid, "action": "accept", "content": bad}
            )
            refused = await ws.until("error", ref="a1")
            good = {"name": "Ada", "email": "ada@example.org", "subscribe": True}
            await ws.send(
                {"type": "answer_elicitation", "ref": "a2", "elicitation": eid, "action": "accept", "content": good}
            )
            await ws.until("elicitation.answered", ref="a2")
            ended = await ws.until("call.ended", call=call)
            await ws.send({"type": "answer_elicitation", "ref": "a3", "elicitation": eid, "action": "decline"})
            again = await ws.until("error", ref="a3")
            return asked, refused, ended, again

    asked, refused, ended, again = run(scenario())
    assert asked["schema"]["properties"]["email"]["format"] == "email"
    assert asked["defaults"] == {"subscribe": False}
    assert [e["path"] for e in refused["errors"]] == [["email"]]
    assert ended["status"] == "succeeded", ended
    assert ended["result"]["content"][0]["text"] == "will contact Ada <ada@example.org> about the portal"
    assert "already closed" in again["message"]
    row = Elicitation.objects.get(pk=asked["elicitation"])
    assert (row.state, row.response["email"], str(row.call_id)) == ("accept", "ada@example.org", ended["call"])
    assert row.answered_at is not None


def test_a_declined_form_tells_the_tool(alice, era_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, era_server.pk, "ask", {"topic": "x"})
            asked = await ws.until("elicitation.requested", call=call)
            await ws.send({"type": "answer_elicitation", "elicitation": asked["elicitation"], "action": "decline"})
            return await ws.until("call.ended", call=call)

    ended = run(scenario())
    assert ended["result"]["content"][0]["text"] == "no contact given (decline)"


def test_only_the_calls_owner_can_answer_and_unknown_forms_are_refused(alice, bob, demo_server):
    alice_cookie, bob_cookie = session_cookie(alice), session_cookie(bob)

    async def scenario():
        async with Playground(alice_cookie) as ws:
            call = await _start(ws, demo_server.pk, "ask", {"topic": "x"})
            asked = await ws.until("elicitation.requested", call=call)
            async with Playground(bob_cookie) as intruder:
                answer = {"type": "answer_elicitation", "ref": "b", "elicitation": asked["elicitation"]}
                await intruder.send({**answer, "action": "accept", "content": {"name": "Bob", "email": "b@b.bb"}})
                stolen = await intruder.until("error", ref="b")
            await ws.send({"type": "answer_elicitation", "ref": "u", "elicitation": str(call), "action": "cancel"})
            unknown = await ws.until("error", ref="u")
            await ws.send({"type": "answer_elicitation", "elicitation": asked["elicitation"], "action": "cancel"})
            return stolen, unknown, await ws.until("call.ended", call=call)

    stolen, unknown, ended = run(scenario())
    assert stolen["message"] == unknown["message"] == "Unknown elicitation."
    assert ended["result"]["content"][0]["text"] == "no contact given (cancel)"


def test_an_unanswered_form_times_out_as_cancel_and_stops_the_request_clock(alice, era_server):
    # The time to answer is the server's own setting, so only this test's forms are short-lived
    # (a loaded machine never makes the other tests' answers late). The request deadline is shorter
    # than the wait for a person: the call must still end as the tool decides, not timed out
    # (mcp-sdk-notes §4: the handshake era's clock would keep running).
    era_server.elicitation_timeout, era_server.request_timeout = 2, 1
    era_server.save()
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, era_server.pk, "ask", {"topic": "x"})
            asked = await ws.until("elicitation.requested", call=call)
            ended_form = await ws.until("elicitation.ended", elicitation=asked["elicitation"])
            return ended_form, await ws.until("call.ended", call=call)

    ended_form, ended = run(scenario())
    assert ended_form["state"] == "timed_out"
    assert ended["status"] == "succeeded", ended
    assert ended["result"]["content"][0]["text"] == "no contact given (cancel)"
    assert Elicitation.objects.get(pk=ended_form["elicitation"]).state == "timed_out"


def test_server_logs_reach_the_call(alice, era_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(era_server.pk, "chatter", {"text": "hi"})
            # In the handshake era the SDK handles each notification in a task of its own, so a log
            # line may be published after the result: wait for the last one.
            if not any(e["type"] == "call.log" and e["data"] == "error: hi" for e in ws.seen):
                await ws.until("call.log", data="error: hi")
            return ended, sorted((e for e in ws.seen if e["type"] == "call.log"), key=lambda e: e["data"])

    ended, logs = run(scenario())
    assert ended["status"] == "succeeded"
    # The default level is info: the debug message is not asked for.
    assert [(e["level"], e["data"]) for e in logs] == [
        ("error", "error: hi"),
        ("info", "info: hi"),
        ("warning", "warning: hi"),
    ]
    assert all(e["call"] == ended["call"] for e in logs)


def test_the_servers_log_level_decides_which_messages_are_shown(alice, demo_server):
    demo_server.log_level = "warning"
    demo_server.save()
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(demo_server.pk, "chatter", {"text": "hi"})
            if not any(e["type"] == "call.log" and e["data"] == "error: hi" for e in ws.seen):
                await ws.until("call.log", data="error: hi")
            return ended, sorted(e["data"] for e in ws.seen if e["type"] == "call.log")

    ended, logs = run(scenario())
    assert ended["status"] == "succeeded"
    assert logs == ["error: hi", "warning: hi"]

    demo_server.log_level = ""  # none: the server is not asked for logs, and none are shown

    demo_server.save()

    async def silent():
        async with Playground(cookie) as ws:
            ended = await ws.call(demo_server.pk, "chatter", {"text": "quiet"})
            await ws.call(demo_server.pk, "echo", {"message": "after"})  # any late log line would be here by now
            return ended, [e for e in ws.seen if e["type"] == "call.log"]

    ended, logs = run(silent())
    assert ended["status"] == "succeeded" and logs == []


def test_a_10_mb_output_is_truncated_and_kept_whole_for_its_owner(alice, bob, demo_server, client):
    # The handshake era: 10 MB over stdio took 2.7 s there and 13.3 s in the 2026 era (measured,
    # docs/websocket-protocol.md), too slow for a test on a shared machine.
    demo_server.protocol, demo_server.request_timeout = "legacy", 60
    demo_server.save()
    cookie = session_cookie(alice)
    size = 10 * 1024 * 1024

    bob_cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws, Playground(bob_cookie) as other:
            call = await _start(ws, demo_server.pk, "big", {"size_bytes": size})
            await ws.until("call.started", call=call)
            # Meanwhile the worker serves someone else (their own session of the same server).
            meanwhile = await other.call(demo_server.pk, "echo", {"message": "not blocked"}, timeout=120)
            big = await ws.until("call.ended", call=call, timeout=120)
            after = await ws.call(demo_server.pk, "echo", {"message": "still serving"})
            return big, meanwhile, after, ws.seen

    big, meanwhile, after, seen = run(scenario())
    assert meanwhile["status"] == "succeeded", meanwhile
    # What crossed the WebSocket was the cut result (a 10 MB frame used to close the socket).
    assert max(len(json.dumps(event)) for event in seen) < 200_000
    assert big["status"] == "succeeded", big
    texts = [block["text"] for block in big["result"]["content"]]
    assert texts[-1].startswith("[OUTPUT TRUNCATED - exceeded 25000 token limit]")
    assert sum(len(t) for t in texts[:-1]) <= 25_000 * 4
    assert big["details"]["truncated"]["full_bytes"] > size
    assert after["status"] == "succeeded"

    url = f"/calls/{big['call']}/full-output"
    client.force_login(bob)
    assert client.get(url).status_code == 404
    client.force_login(alice)
    response = client.get(url)
    assert response.status_code == 200
    whole = json.loads(b"".join(response.streaming_content) if response.streaming else response.content)
    assert len(whole["content"][0]["text"]) == size


def test_cancelling_a_call_closes_its_open_form(alice, era_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, era_server.pk, "ask", {"topic": "x"})
            asked = await ws.until("elicitation.requested", call=call)
            await ws.send({"type": "cancel_call", "call": call})
            ended = await ws.until("call.ended", call=call)
            closed = next((e for e in ws.seen if e["type"] == "elicitation.ended"), None)
            closed = closed or await ws.until("elicitation.ended", elicitation=asked["elicitation"])
            after = await ws.call(era_server.pk, "echo", {"message": "still here"})
            return ended, closed, after

    ended, closed, after = run(scenario())
    assert ended["status"] == "cancelled"
    assert closed["state"] == "cancel"
    assert after["status"] == "succeeded"
    assert Elicitation.objects.get(pk=closed["elicitation"]).state == "cancel"


def test_every_kind_of_form_field_is_checked_before_it_is_sent(alice, era_server):
    cookie = session_cookie(alice)
    bad = {
        "name": "A",
        "email": "nobody",
        "website": "not a uri",
        "birthday": "31/12/1990",
        "meeting": "tomorrow",
        "age": 7,
        "rating": 9.5,
        "subscribe": "yes",
        "size": "xl",
        "toppings": ["cheese", "ham", "olives"],
    }
    good = {
        "name": "Ada",
        "email": "ada@example.org",
        "website": "https://ada.example",
        "birthday": "1815-12-10",
        "meeting": "2026-12-01T10:00:00Z",
        "age": 36,
        "rating": 5,
        "subscribe": False,
        "size": "l",
        "colour": "green",
        "toppings": ["ham", "olives"],
    }

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, era_server.pk, "survey", {})
            asked = await ws.until("elicitation.requested", call=call)
            eid = asked["elicitation"]
            answer = {"type": "answer_elicitation", "elicitation": eid, "action": "accept"}
            await ws.send({**answer, "ref": "bad", "content": bad})
            refused = await ws.until("error", ref="bad")
            await ws.send({**answer, "ref": "extra", "content": {**good, "password": "x"}})
            extra = await ws.until("error", ref="extra")
            await ws.send({**answer, "ref": "good", "content": good})
            await ws.until("elicitation.answered", ref="good")
            return asked, refused, extra, await ws.until("call.ended", call=call)

    asked, refused, extra, ended = run(scenario())
    properties = asked["schema"]["properties"]
    assert properties["size"]["oneOf"][2] == {"const": "l", "title": "Large"}
    assert properties["toppings"]["items"]["enum"] == ["cheese", "ham", "olives"]
    assert asked["defaults"] == {
        "website": "https://example.org",
        "rating": 4.5,
        "subscribe": True,
        "size": "m",
        "toppings": ["cheese"],
    }
    wrong = {error["path"][0] for error in refused["errors"] if error["path"]}
    assert wrong == set(bad) | {"colour"}, refused["errors"]
    assert [error["path"] for error in extra["errors"]] == [["password"]]
    assert ended["status"] == "succeeded", ended
    assert json.loads(ended["result"]["content"][0]["text"]) == {**good, "rating": 5.0}


def test_roots_set_by_the_admin_answer_roots_list(alice, era_server, tmp_path):
    cookie = session_cookie(alice)

    async def ask():
        async with Playground(cookie) as ws:
            return await ws.call(era_server.pk, "roots", {})

    none = run(ask())
    era_server.roots = [tmp_path.as_uri(), "file:///srv/shared/"]
    era_server.save()
    told = run(ask())
    assert none["status"] == "succeeded", none
    assert none["result"]["structuredContent"] == {"roots": []}
    # New roots, new session: the server is told the roots it now has.
    assert told["result"]["structuredContent"] == {
        "roots": [{"uri": tmp_path.as_uri(), "name": tmp_path.name}, {"uri": "file:///srv/shared/", "name": "shared"}]
    }


def test_a_person_writes_the_reply_to_a_sampling_request(alice, bob, era_server):
    cookie, bob_cookie = session_cookie(alice), session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, era_server.pk, "summarize", {"text": "MCP lets tools ask back."})
            asked = await ws.until("sampling.requested", call=call)
            sid = asked["sampling"]
            async with Playground(bob_cookie) as intruder:
                await intruder.send({"type": "answer_sampling", "ref": "b", "sampling": sid, "action": "decline"})
                stolen = await intruder.until("error", ref="b")
            await ws.send({"type": "answer_sampling", "ref": "e", "sampling": sid, "action": "approve", "text": ""})
            empty = await ws.until("error", ref="e")
            reply = {"type": "answer_sampling", "ref": "a", "sampling": sid, "action": "approve"}
            await ws.send({**reply, "text": "Tools can ask the user.", "model": "alice-by-hand"})
            await ws.until("sampling.answered", ref="a")
            return asked, stolen, empty, await ws.until("call.ended", call=call)

    asked, stolen, empty, ended = run(scenario())
    request = asked["request"]
    assert request["messages"] == [
        {"role": "user", "content": {"type": "text", "text": "Summarize in one line: MCP lets tools ask back."}}
    ]
    assert (request["systemPrompt"], request["maxTokens"]) == ("You write one-line summaries.", 100)
    assert stolen["message"] == "Unknown sampling request."
    assert "'text' must be a string" in empty["message"]
    assert ended["status"] == "succeeded", ended
    assert ended["result"]["content"][0]["text"] == "alice-by-hand says: Tools can ask the user."
    row = SamplingRequest.objects.get(pk=asked["sampling"])
    assert (row.state, row.reply) == ("approve", "Tools can ask the user.")


def test_a_declined_sampling_request_reaches_the_server_as_an_error(alice, era_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, era_server.pk, "summarize", {"text": "x"})
            asked = await ws.until("sampling.requested", call=call)
            await ws.send({"type": "answer_sampling", "sampling": asked["sampling"], "action": "decline"})
            return await ws.until("call.ended", call=call)

    ended = run(scenario())
    # The demo server (the SDK's Sample resolver) passes the refusal on as the request's error.
    assert (ended["status"], ended["error"]) == ("failed", "MCP error -1: The user declined the sampling request.")


@pytest.fixture
def handshake_server(demo_server):
    # URL-mode elicitation mid-call needs the handshake era: the SDK's 2026 server has no way to ask it.
    demo_server.protocol = "legacy"
    demo_server.save()
    return demo_server


@pytest.mark.parametrize("action, text", [("accept", "account connected"), ("decline", "not connected (decline)")])
def test_a_url_elicitation_is_shown_and_opened_only_with_consent(alice, handshake_server, action, text):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, handshake_server.pk, "connect_account", {})
            asked = await ws.until("elicitation.requested", call=call)
            await ws.send(
                {"type": "answer_elicitation", "ref": "u", "elicitation": asked["elicitation"], "action": action}
            )
            await ws.until("elicitation.answered", ref="u")
            ended = await ws.until("call.ended", call=call)
            completed = [e for e in ws.seen if e["type"] == "elicitation.completed"]
            if action == "accept" and not completed:
                completed = [await ws.until("elicitation.completed", call=call)]
            return asked, ended, completed

    asked, ended, completed = run(scenario())
    assert (asked["mode"], asked["url"]) == ("url", "https://example.org/consent")
    assert asked["message"] == "Sign in to the demo service to connect your account."
    assert ended["result"]["content"][0]["text"] == text
    assert [e["elicitation_id"] for e in completed] == (["demo-connect"] if action == "accept" else [])
    row = Elicitation.objects.get(pk=asked["elicitation"])
    assert (row.mode, row.state, row.response) == ("url", action, None)


def test_a_url_that_is_no_web_page_is_declined_without_asking(alice, handshake_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            return await ws.call(handshake_server.pk, "connect_account", {"url": "javascript:alert(1)"})

    ended = run(scenario())
    assert ended["result"]["content"][0]["text"] == "not connected (decline)"
    assert not Elicitation.objects.exists()


def test_the_url_required_error_says_where_to_go_and_a_retry_works(alice, era_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            first = await ws.call(era_server.pk, "needs_authorization", {"account": "files"})
            second = await ws.call(era_server.pk, "needs_authorization", {"account": "files"})
            return first, second

    first, second = run(scenario())
    assert (first["status"], first["error_kind"]) == ("failed", "url_elicitation_required"), first
    assert first["details"]["elicitations"] == [
        {
            "mode": "url",
            "message": "Authorize access to files first.",
            "url": "https://example.org/consent?account=files",
            "elicitationId": "authorize-files",
        }
    ]
    assert second["result"]["content"][0]["text"] == "files is authorized"


def test_a_team_admins_automatic_answer_is_given_without_asking_and_audited(alice, bob, demo_server):
    from django.test import Client

    from sessions.models import AuditEvent

    admin = Client()
    admin.force_login(alice)
    hooks = f"/servers/{demo_server.pk}/hooks/"
    bad = admin.post(hooks, {"message_contains": "contact", "action": "accept", "content": "[1]"})
    assert "The answer must be a JSON object of field values." in bad.context["form"].errors["content"]
    answer = {"name": "Ops", "email": "ops@example.org"}
    saved = admin.post(
        hooks, {"message_contains": "CONTACT", "fields": "email", "action": "accept", "content": json.dumps(answer)}
    )
    assert saved.status_code == 302
    # A member may use the server, not answer for the team.
    member = Client()
    member.force_login(bob)
    assert member.get(hooks).status_code == 403
    cookie = session_cookie(bob)

    async def scenario():
        async with Playground(cookie) as ws:
            call = await _start(ws, demo_server.pk, "ask", {"topic": "the portal"})
            auto = await ws.until("elicitation.auto_answered", call=call)
            ended = await ws.until("call.ended", call=call)
            asked = [e for e in ws.seen if e["type"] == "elicitation.requested"]
            # The survey's form does not fit the answer (no such fields asked together): a person is asked.
            other = await _start(ws, demo_server.pk, "survey", {})
            form = await ws.until("elicitation.requested", call=other)
            await ws.send({"type": "answer_elicitation", "elicitation": form["elicitation"], "action": "cancel"})
            await ws.until("call.ended", call=other)
            return auto, ended, asked

    auto, ended, asked = run(scenario())
    assert asked == []
    assert auto["action"] == "accept"
    assert ended["result"]["content"][0]["text"] == "will contact Ops <ops@example.org> about the portal"
    row = Elicitation.objects.get(pk=auto["elicitation"])
    assert (row.state, row.response, row.hook_id) == ("accept", answer, auto["hook"])
    event = AuditEvent.objects.get(kind="hook")
    assert (event.username, event.tool, event.outcome) == ("bob", "ask", "accept")
    assert event.reason.startswith(f"Automatic answer #{auto['hook']} (accept with the answer below) to: Who should")
    assert AuditEvent.objects.filter(kind="policy", outcome="hook_saved").count() == 1
