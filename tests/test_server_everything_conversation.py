"""A call is a conversation, against the reference server @modelcontextprotocol/server-everything
(TypeScript SDK, stdio, the handshake era), through the whole portal path: progress, an elicitation
form answered, a sampling request answered by a person, roots from the server's settings, logs.

Installed by `make test-servers` (tests/npm); skipped, saying so, when it is not.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.conftest import EVERYTHING, EVERYTHING_MISSING
from tests.ws import Playground, session_cookie

pytestmark = [
    pytest.mark.skipif(not EVERYTHING.exists(), reason=EVERYTHING_MISSING),
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("worker"),
]


async def start(ws: Playground, server: int, tool: str, arguments: dict) -> str:
    await ws.send({"type": "call", "ref": tool, "server": server, "tool": tool, "arguments": arguments})
    return (await ws.until("call.accepted", ref=tool, timeout=60))["call"]


def test_progress_elicitation_sampling_and_roots(alice, everything):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            long = await ws.call(
                everything.pk, "trigger-long-running-operation", {"duration": 1, "steps": 3}, timeout=60
            )
            progress = [e for e in ws.seen if e["type"] == "call.progress" and e["call"] == long["call"]]

            asking = await start(ws, everything.pk, "trigger-elicitation-request", {})
            asked = await ws.until("elicitation.requested", call=asking, timeout=60)
            answer = {"type": "answer_elicitation", "elicitation": asked["elicitation"], "action": "accept"}
            await ws.send({**answer, "content": {"name": "Ada Lovelace", "email": "not an email"}})
            refused = await ws.until("error", timeout=30)
            await ws.send({**answer, "content": {"name": "Ada Lovelace", "email": "ada@example.com"}})
            elicited = await ws.until("call.ended", call=asking, timeout=60)

            sampling_call = await start(ws, everything.pk, "trigger-sampling-request", {"prompt": "Say hi"})
            sampled = await ws.until("sampling.requested", call=sampling_call, timeout=60)
            await ws.send(
                {
                    "type": "answer_sampling",
                    "sampling": sampled["sampling"],
                    "action": "approve",
                    "text": "Hi from a person.",
                }
            )
            sampling = await ws.until("call.ended", call=sampling_call, timeout=60)

            roots = await ws.call(everything.pk, "get-roots-list", {}, timeout=60)
            return long, progress, asked, refused, elicited, sampled, sampling, roots

    long, progress, asked, refused, elicited, sampled, sampling, roots = asyncio.run(scenario())

    assert long["status"] == "succeeded", long
    assert [e["progress"] for e in progress] == [1, 2, 3] and progress[-1]["total"] == 3

    assert (
        asked["schema"]["required"] == ["name"] and asked["defaults"]["firstLine"] == "It was a dark and stormy night."
    )
    assert refused["errors"] == [{"path": ["email"], "message": "'not an email' is not a 'email'"}]  # never sent
    assert elicited["status"] == "succeeded", elicited
    assert "User provided the requested information" in elicited["result"]["content"][0]["text"]
    assert "Ada Lovelace" in str(elicited["result"]["content"])

    assert "Say hi" in str(sampled["request"]["messages"])
    assert sampling["status"] == "succeeded", sampling
    assert "Hi from a person." in sampling["result"]["content"][0]["text"]

    assert roots["status"] == "succeeded"
    assert "file:///srv/projects/portal" in roots["result"]["content"][0]["text"]


def test_the_raw_json_rpc_view_holds_the_servers_requests_and_the_answers_as_they_passed(alice, everything):
    from sessions.models import ToolCall

    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            asking = await start(ws, everything.pk, "trigger-elicitation-request", {})
            asked = await ws.until("elicitation.requested", call=asking, timeout=60)
            answer = {"type": "answer_elicitation", "elicitation": asked["elicitation"], "action": "decline"}
            await ws.send(answer)
            elicited = await ws.until("call.ended", call=asking, timeout=60)
            sampling_call = await start(ws, everything.pk, "trigger-sampling-request", {"prompt": "Say hi"})
            sampled = await ws.until("sampling.requested", call=sampling_call, timeout=60)
            await ws.send({"type": "answer_sampling", "sampling": sampled["sampling"], "action": "decline"})
            sampling = await ws.until("call.ended", call=sampling_call, timeout=60)
            return elicited, sampling

    elicited, sampling = asyncio.run(scenario())
    assert "exchange" not in elicited["details"], "the raw view stays on the record, out of the live event"

    def methods(call_id: str) -> list[tuple[str, str]]:
        exchange = ToolCall.objects.get(pk=call_id).exchange()
        times = [m["at_ms"] for m in exchange if m["at_ms"] is not None]
        assert times == sorted(times), "in the order they passed"
        return [(m["direction"], m["message"].get("method") or "answer") for m in exchange]

    elicitation = methods(elicited["call"])
    assert elicitation[0] == ("sent", "tools/call")
    assert ("received", "elicitation/create") in elicitation
    # The portal's own answer to the server's request (the person declined), then the call's answer.
    assert elicitation.index(("sent", "answer")) > elicitation.index(("received", "elicitation/create"))
    assert elicitation[-1] == ("received", "answer")
    sampled = methods(sampling["call"])
    assert ("received", "sampling/createMessage") in sampled and ("sent", "answer") in sampled
    record = ToolCall.objects.get(pk=sampling["call"]).exchange()
    assert record[-1]["message"]["result"] == ToolCall.objects.get(pk=sampling["call"]).result


def test_a_tool_that_requires_tasks_runs_as_one_its_status_and_question_reach_the_page(alice, everything):
    """simulate-research-query (taskSupport "required"): the worker asks for a task, polls it, the
    server's question while the task is input_required is a form like any other, and the report
    comes back as the call's result; a reloaded page sees the task of a call in flight."""
    from sessions.models import ToolCall

    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send({"type": "list_tools", "server": everything.pk})
            listed = await ws.until("tools", timeout=60)
            research = await start(ws, everything.pk, "simulate-research-query", {"topic": "python", "ambiguous": True})
            asked = await ws.until("elicitation.requested", call=research, timeout=60)
        # The page reloads while the server waits for the answer.
        async with Playground(cookie) as ws:
            in_flight = await ws.calls_in_flight()
            await ws.answer_form(asked, {"interpretation": "snake"})
            ended = await ws.until("call.ended", call=research, timeout=60)
            return listed, asked, in_flight, ended, [e for e in ws.seen if e["type"] == "call.task"]

    listed, asked, in_flight, ended, statuses = asyncio.run(scenario())
    support = {t["name"]: t["task_support"] for t in listed["tools"]}
    assert support["simulate-research-query"] == "required"
    assert {v for k, v in support.items() if k != "simulate-research-query"} == {"forbidden"}
    assert "multiple interpretations" in asked["message"]
    (reloaded,) = [c for c in in_flight if c["call"] == ended["call"]]
    assert reloaded["task"]["status"] == "input_required" and reloaded["task"]["id"]
    assert reloaded["elicitations"][0]["elicitation"] == asked["elicitation"], "the open question survives a reload"

    assert ended["status"] == "succeeded", ended
    assert "Research Report: python (snake)" in ended["result"]["content"][0]["text"]
    seen = [e["task"]["status"] for e in statuses]
    assert seen[0] == "working" and seen[-1] == "completed", seen
    assert {e["task"]["id"] for e in statuses} == {reloaded["task"]["id"]}
    record = ToolCall.objects.get(pk=ended["call"])
    assert record.task["status"] == "completed" and record.task["era"] == "legacy"
    assert ended["task"]["id"] == record.task["id"]


def test_cancelling_a_task_cancels_it_on_the_server(alice, everything):
    from sessions.models import ToolCall

    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            research = await start(ws, everything.pk, "simulate-research-query", {"topic": "tides"})
            await ws.until("call.task", call=research, timeout=60)
            await ws.cancel(research)
            return await ws.until("call.ended", call=research, timeout=60)

    ended = asyncio.run(scenario())
    assert ended["status"] == "cancelled", ended
    # The server's own answer to tasks/cancel (the handshake era's carries the task) is on the record.
    task = ToolCall.objects.get(pk=ended["call"]).task
    assert task["status"] == "cancelled" and task["message"] == "Client cancelled task execution.", task


def test_a_request_the_server_asks_the_portal_to_run_as_a_task_is_answered_by_the_person(alice, everything):
    """server-everything's trigger-*-async tools (offered only to a client that declares
    `tasks.requests`): the server's sampling request comes as a task the portal runs, so the server
    polls it (tasks/get) and fetches the person's reply (tasks/result); a declined form fails the task."""
    from sessions.models import ToolCall

    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            sampling_call = await start(ws, everything.pk, "trigger-sampling-request-async", {"prompt": "Say hi"})
            sampled = await ws.until("sampling.requested", call=sampling_call, timeout=60)
            answer = {"type": "answer_sampling", "sampling": sampled["sampling"], "action": "approve"}
            await ws.send(answer | {"text": "Hi from a person, later."})
            sampling = await ws.until("call.ended", call=sampling_call, timeout=60)
            asking = await start(ws, everything.pk, "trigger-elicitation-request-async", {})
            asked = await ws.until("elicitation.requested", call=asking, timeout=60)
            await ws.send({"type": "answer_elicitation", "elicitation": asked["elicitation"], "action": "decline"})
            return sampling, await ws.until("call.ended", call=asking, timeout=60)

    sampling, declined = asyncio.run(scenario())
    assert sampling["status"] == "succeeded", sampling
    text = sampling["result"]["content"][0]["text"]
    assert text.startswith("[COMPLETED] Async sampling completed!") and "Hi from a person, later." in text, text
    exchange = ToolCall.objects.get(pk=sampling["call"]).exchange()
    sent = [m["message"] for m in exchange if m["direction"] == "received" and m["message"].get("method")]
    assert [m["method"] for m in sent][:1] == ["sampling/createMessage"] and "task" in sent[0]["params"]
    assert {"tasks/get", "tasks/result"} <= {m["method"] for m in sent}
    assert declined["status"] == "succeeded", declined  # the tool reports the task's end as text
    assert "decline" in str(declined["result"]["content"]).lower(), declined["result"]
