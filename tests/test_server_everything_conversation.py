"""A call is a conversation, against the reference server @modelcontextprotocol/server-everything
(TypeScript SDK, stdio, the handshake era), through the whole portal path: progress, an elicitation
form answered, a sampling request answered by a person, roots from the server's settings, logs.

Installed by `make test-servers` (tests/npm); skipped, saying so, when it is not.
"""

from __future__ import annotations

import asyncio

import pytest

from servers.models import Effect, PermissionRule, Server
from tests.conftest import NODE, ROOT
from tests.ws import Playground, session_cookie

ENTRY = ROOT / "tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"

pytestmark = [
    pytest.mark.skipif(not ENTRY.exists(), reason="server-everything is not installed: run `make test-servers`"),
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("worker"),
]


@pytest.fixture
def everything(alice):
    team = alice.memberships.get().team
    server = Server.objects.create(
        team=team,
        name="everything",
        transport="stdio",
        command=NODE,
        args=[str(ENTRY), "stdio"],
        roots=["file:///srv/projects/portal"],
        request_timeout=30,
    )
    # Its tools carry no annotations, so the default policy would ask before each: not the subject here.
    PermissionRule.objects.create(team=team, pattern="mcp__everything", effect=Effect.ALLOW)
    return server


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


def test_a_tool_that_requires_tasks_is_marked_and_refused_with_a_clear_message(alice, everything):
    cookie = session_cookie(alice)

    async def scenario():
        async with Playground(cookie) as ws:
            await ws.send({"type": "list_tools", "server": everything.pk})
            listed = await ws.until("tools", timeout=60)
            ended = await ws.call(everything.pk, "simulate-research-query", {"topic": "tides"}, timeout=60)
            return listed, ended

    listed, ended = asyncio.run(scenario())
    assert "tools" in listed, listed
    research = next(t for t in listed["tools"] if t["name"] == "simulate-research-query")
    assert research["needs_tasks"] is True
    assert not any(t["needs_tasks"] for t in listed["tools"] if t["name"] != "simulate-research-query")
    assert (ended["status"], ended["error_kind"]) == ("rejected", "needs_tasks"), ended
    assert "tasks" in ended["error"] and "not supported yet" in ended["error"]
    assert "MCP error" not in ended["error"], "refused by the portal, never sent to the server"
