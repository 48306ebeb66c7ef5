"""One intent is one call, and every page of a person sees their calls as they are: a reloaded page and
a second tab pick up calls in flight, their progress and open forms; list changes and server logs
outside calls reach the pages they belong to. Over the WebSocket, through a real worker."""

from __future__ import annotations

import asyncio

import pytest

from sessions.models import Elicitation, ToolCall
from tests.servers.fault_server import TOOLS as FAULT_TOOLS
from tests.ws import Playground, run, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]


def test_the_same_request_id_twice_is_one_call(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            first = await ws.start(demo_server.pk, "write_note", {"text": "once"}, request_id="intent-1")
            again = await ws.start(demo_server.pk, "write_note", {"text": "once"}, request_id="intent-1")
            await ws.answer(await ws.until("approval.requested", call=first["call"]), "allow_once")
            ended = await ws.until("call.ended", call=first["call"])
            # After its end, the same intent still names the same call: its end comes back at once.
            late = await ws.start(demo_server.pk, "write_note", {"text": "once"}, request_id="intent-1")
            late_end = await ws.until("call.ended", ref=late["ref"])
            other = await ws.start(demo_server.pk, "echo", {"message": "x"}, request_id="intent-2")
            return first, again, ended, late, late_end, other

    first, again, ended, late, late_end, other = run(scenario())
    assert again["call"] == first["call"] == late["call"] == late_end["call"]
    assert first["request_id"] == "intent-1"
    assert ended["status"] == "succeeded" and late_end["status"] == "succeeded"
    assert ended["result"]["content"][0]["text"].startswith("saved note")
    assert ToolCall.objects.filter(user=alice, tool="write_note").count() == 1
    assert other["call"] != first["call"]


def test_two_sockets_sending_the_same_request_id_at_once_make_one_call(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as a, Playground(cookie) as b:
            accepted = await asyncio.gather(
                a.start(demo_server.pk, "echo", {"message": "raced"}, request_id="raced"),
                b.start(demo_server.pk, "echo", {"message": "raced"}, request_id="raced"),
            )
            await a.until("call.ended", call=accepted[0]["call"])
            return accepted

    accepted = run(scenario())
    assert accepted[0]["call"] == accepted[1]["call"]
    assert ToolCall.objects.filter(user=alice, request_id="raced").count() == 1


def test_another_persons_request_id_is_theirs(alice, bob, demo_server):
    cookies = session_cookie(alice), session_cookie(bob)

    async def scenario():
        async with Playground(cookies[0]) as a, Playground(cookies[1]) as b:
            mine = await a.start(demo_server.pk, "echo", {"message": "a"}, request_id="same")
            theirs = await b.start(demo_server.pk, "echo", {"message": "b"}, request_id="same")
            return mine, theirs

    mine, theirs = run(scenario())
    assert mine["call"] != theirs["call"]


@pytest.mark.parametrize("request_id", ["", "x" * 101, 7, None, ["a"]])
def test_a_request_id_must_be_a_short_string(alice, demo_server, request_id):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send(
                {"type": "call", "ref": "c", "server": demo_server.pk, "tool": "echo", "request_id": request_id}
            )
            return await ws.until("error", ref="c")

    error = run(scenario())
    assert error["message"] == "'request_id' must be a string of 1 to 100 characters."
    assert not ToolCall.objects.exists()


def test_a_second_tab_sees_the_call_its_progress_and_its_form_and_answers_it(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as first:
            asking = (await first.start(demo_server.pk, "ask", {"topic": "the launch"}))["call"]
            asked = await first.until("elicitation.requested", call=asking)
            counting = (await first.start(demo_server.pk, "count", {"steps": 30, "delay": 0.1}))["call"]
            await first.until("call.progress", call=counting)
            async with Playground(cookie) as second:  # a new tab, or the same page reloaded
                calls = {entry["call"]: entry for entry in await second.calls_in_flight()}
                form = calls[asking]["elicitations"][0]
                await second.answer_form(form, {"name": "Ann", "email": "ann@example.com"})
                closed_there = await second.until("elicitation.answered", elicitation=form["elicitation"])
                closed_here = await first.until("elicitation.answered", elicitation=asked["elicitation"])
                ended = await second.until("call.ended", call=asking)
                await first.until("call.ended", call=counting, timeout=30)
                after = await second.calls_in_flight()
            return calls, counting, asking, asked, form, closed_there, closed_here, ended, after

    calls, counting, asking, asked, form, closed_there, closed_here, ended, after = run(scenario())
    assert calls[counting]["tool"] == "count" and calls[counting]["status"] == "running"
    assert calls[counting]["progress"]["total"] == 30 and calls[counting]["progress"]["progress"] >= 1
    assert form == {**asked, "defaults": asked["defaults"]}  # the very form the first tab was shown
    assert calls[asking]["server_name"] == "demo" and calls[asking]["sampling"] == []
    assert closed_there["call"] == closed_here["call"] == asking
    assert ended["result"]["content"][0]["text"] == "will contact Ann <ann@example.com> about the launch"
    assert Elicitation.objects.get(pk=form["elicitation"]).state == "accept"
    assert after == []


def test_a_page_sees_none_of_another_persons_calls(alice, bob, demo_server):
    cookies = session_cookie(alice), session_cookie(bob)

    async def scenario():
        async with Playground(cookies[0]) as a, Playground(cookies[1]) as b:
            asking = (await a.start(demo_server.pk, "ask", {"topic": "secrets"}))["call"]
            await a.until("elicitation.requested", call=asking)
            theirs = await b.calls_in_flight()
            mine = await a.calls_in_flight()
            await a.cancel(asking)
            await a.until("call.ended", call=asking)
            return theirs, mine, asking

    theirs, mine, asking = run(scenario())
    assert theirs == [] and [entry["call"] for entry in mine] == [asking]


def test_five_new_tools_make_one_tools_changed(alice, fault_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(fault_server.pk, "grow", {"count": 5})
            await ws.until("tools.changed", server=fault_server.pk, timeout=10)
            await asyncio.sleep(1.5)  # any later refresh would be on its way by now
            await ws.call(fault_server.pk, "environment")
            return ended, [e for e in ws.seen if e["type"] == "tools.changed"]

    ended, changes = run(scenario())
    assert ended["result"]["content"][0]["text"] == f"{len(FAULT_TOOLS) + 5} tools"  # its own, and 5 more
    assert changes == [{"type": "tools.changed", "server": fault_server.pk}]


def test_a_log_line_outside_any_call_goes_to_the_servers_log_not_to_a_call(alice, fault_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            ended = await ws.call(fault_server.pk, "log_after", {"text": "roots updated"})
            line = await ws.until("server.log", server=fault_server.pk, timeout=10)
        async with Playground(cookie) as page:  # the server's page, opened later
            kept = await page.server_log(fault_server.pk)
        return ended, line, ws.seen, kept

    ended, line, seen, kept = run(scenario())
    assert ended["status"] == "succeeded"
    assert (line["level"], line["logger"], line["data"]) == ("warning", "between", "roots updated")
    assert not [e for e in seen if e["type"] == "call.log"]
    assert [(k["level"], k["data"]) for k in kept] == [("warning", "roots updated")]


def test_a_reloaded_page_gets_the_open_sampling_request(alice, demo_server):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as first:
            call = (await first.start(demo_server.pk, "summarize", {"text": "Tools can ask back."}))["call"]
            asked = await first.until("sampling.requested", call=call)
        async with Playground(cookie) as reloaded:
            calls = await reloaded.calls_in_flight()
            await reloaded.send(
                {"type": "answer_sampling", "sampling": asked["sampling"], "action": "approve", "text": "Short."}
            )
            ended = await reloaded.until("call.ended", call=call)
        return asked, calls, ended

    asked, calls, ended = run(scenario())
    assert [entry["sampling"] for entry in calls] == [[asked]]
    assert ended["status"] == "succeeded", ended


def test_in_the_handshake_era_a_log_line_with_two_calls_in_flight_is_neither_calls(alice, demo_server):
    demo_server.protocol = "legacy"
    demo_server.save()
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            first = (await ws.start(demo_server.pk, "sleep", {"seconds": 3}))["call"]
            await ws.until("call.log", call=first, data="sleeping 3 s")  # alone in flight: its own
            second = (await ws.start(demo_server.pk, "sleep", {"seconds": 0.5}))["call"]
            line = await ws.until("server.log", server=demo_server.pk, data="sleeping 0.5 s")
            await ws.until("call.ended", call=first)
            return first, second, line, ws.seen

    first, second, line, seen = run(scenario())
    logs = [(e["call"], e["data"]) for e in seen if e["type"] == "call.log"]
    assert logs == [(first, "sleeping 3 s")]  # the second call's line was not shown as the first's
    assert line["level"] == "info"
