"""Task-augmented calls from an agent's client, served by the portal's MCP endpoint (both eras).

The task is the portal's own call record: its id is the task's id, the record's status is the task's.
The handshake era (2025-11-25): `task` in the `tools/call` params, then tasks/get, tasks/result,
tasks/cancel, tasks/list. The 2026-07-28 extension `io.modelcontextprotocol/tasks`: the portal answers
`resultType: "task"` where the call would keep the client waiting, then tasks/get (the result inline),
tasks/update, tasks/cancel. Through a real portal process and worker, with the SDK's client for the
connection and raw requests for the `tasks/*` methods, which the SDK does not send
(docs/mcp-endpoint.md, "Tasks").
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests import test_mcp_endpoint as endpoint_tests
from tests.test_mcp_endpoint import ERAS, run, token_for

# The portal process (one for this module) and the demo server allowed, as tests/test_mcp_endpoint.py has them.
portal = endpoint_tests.portal
demo = endpoint_tests.demo

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module", autouse=True)
def _the_portals_worker_alone(worker):
    """Embedded mode: the portal process runs the calls with its own worker, and this process's worker
    (the `worker` fixture) would sweep them too. Each process's cache is its own there, so this one
    never sees the portal's worker beat and, once a task call has been held for a heartbeat TTL
    (16 s, counted across tests), hands it "back" to itself, where the stdio server never heard of
    the task. Two embedded portals on one database are no deployment: this process's heartbeat (and
    its sweep) rests while the module runs."""
    if worker.get("mode") != "embedded":
        yield
        return
    from sessions import worker as worker_module

    worker_module.stop_heartbeat()
    try:
        yield
    finally:
        worker_module.start_heartbeat()


EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
HANDSHAKE_TASK_KEYS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
MODERN_TASK_KEYS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}


def declaring_tasks() -> dict[str, Any]:
    """Client options that declare the 2026 tasks extension (on every request's capabilities)."""
    from mcp.client.extension import advertise

    return {"extensions": [advertise(EXTENSION)]}


async def send(client, method: str, params: dict[str, Any], task_id: str | None = None) -> dict[str, Any]:
    from sessions.mcp.tasks import send as raw

    return await raw(client.session, method, params, task_id=task_id, timeout=30)


async def poll(client, task_id: str, until, seconds: float = 20) -> list[dict[str, Any]]:
    """tasks/get until `until` holds of the task; every answer seen, the last one last."""
    seen = []
    deadline = time.monotonic() + seconds
    while True:
        seen.append(await send(client, "tasks/get", {"taskId": task_id}, task_id))
        if until(seen[-1]):
            return seen
        assert time.monotonic() < deadline, f"not reached in {seconds} s: {seen[-1]}"
        await asyncio.sleep(0.1)


async def refused(work) -> Any:
    from mcp.shared.exceptions import MCPError

    try:
        answer = await work
    except MCPError as exc:
        return exc.error
    raise AssertionError(f"answered: {answer}")


def test_a_handshake_client_calls_as_a_task_and_follows_it(portal, alice, demo):
    import mcp_types as types

    from sessions.models import ToolCall

    token = token_for(alice)
    asked: list[tuple[str, Any]] = []

    async def on_elicit(ctx, params):
        asked.append((params.message, (params.meta or {}).get(RELATED_TASK)))
        return types.ElicitResult(action="accept", content={"angle": "history"})

    async def work(client):
        capabilities = client.session.server_capabilities.model_dump(by_alias=True, exclude_none=True)
        arguments = {"topic": "tides", "steps": 2, "step_seconds": 0.3, "ask": True}
        created = await send(client, "tools/call", {"name": "research", "arguments": arguments, "task": {"ttl": 60000}})
        task_id = created["task"]["taskId"]
        # The client declared elicitation, so the form is its to answer: input_required, until tasks/result.
        seen = await poll(client, task_id, lambda t: t["status"] != "working")
        result = await send(client, "tasks/result", {"taskId": task_id})
        ended = await send(client, "tasks/get", {"taskId": task_id})
        listed = await send(client, "tasks/list", {})
        return capabilities, created, seen, result, ended, listed

    capabilities, created, seen, result, ended, listed = run(
        f"{portal.url}/mcp/demo/", token, "legacy", work, elicitation_callback=on_elicit
    )
    assert capabilities["tasks"] == {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
    # CreateTaskResult at once: the task is the call's record.
    task = created["task"]
    call = ToolCall.objects.get(tool="research")
    assert set(task) == HANDSHAKE_TASK_KEYS and task["taskId"] == str(call.id)
    assert task["status"] == "working" and task["ttl"] is None and task["pollInterval"] == 1000
    assert seen[-1]["status"] == "input_required" and "Which angle on tides?" in seen[-1]["statusMessage"], seen
    assert all(t["status"] == "working" for t in seen[:-1])
    # tasks/result relayed the form, naming the task, and returns what the plain call would.
    assert asked == [("Which angle on tides?", {"taskId": str(call.id)})]
    assert result["content"][0]["text"] == "Report on tides (history): 2 steps done."
    assert result["_meta"][RELATED_TASK] == {"taskId": str(call.id)}
    assert ended["status"] == "completed"
    assert [t["taskId"] for t in listed["tasks"]] == [str(call.id)]
    call.refresh_from_db()
    assert (call.status, call.as_task, call.via) == ("succeeded", True, "mcp")
    assert call.task.get("id")  # the upstream server ran it as its own task


def test_a_2026_client_that_declares_tasks_gets_one_for_a_task_tool(portal, alice, demo):
    import mcp_types as types

    from sessions.models import ToolCall

    token = token_for(alice)

    async def on_elicit(ctx, params):
        raise AssertionError("a task's question goes through tasks/get and tasks/update")

    async def work(client):
        # The client was told its version (no probe): it asks what the portal serves, as a prober would.
        extensions = (await send(client, "server/discover", {}))["capabilities"].get("extensions") or {}
        plain = await send(client, "tools/call", {"name": "echo", "arguments": {"message": "at once"}})
        arguments = {"topic": "reefs", "steps": 2, "step_seconds": 0.3, "ask": True}
        created = await send(client, "tools/call", {"name": "research", "arguments": arguments})
        task_id = created["taskId"]
        asking = (await poll(client, task_id, lambda t: t["status"] != "working"))[-1]
        key = next(iter(asking.get("inputRequests") or {"none": None}))
        wrong = types.ElicitResult(action="accept", content={"angle": "economics"})  # not one of the form's
        refusal = await refused(
            send(
                client,
                "tasks/update",
                {"taskId": task_id, "inputResponses": {key: wrong.model_dump(by_alias=True, exclude_none=True)}},
                task_id,
            )
        )
        answer = types.ElicitResult(action="accept", content={"angle": "science"})
        updated = await send(
            client,
            "tasks/update",
            {"taskId": task_id, "inputResponses": {key: answer.model_dump(by_alias=True, exclude_none=True)}},
            task_id,
        )
        ended = (await poll(client, task_id, lambda t: t["status"] in ("completed", "failed", "cancelled")))[-1]
        return extensions, plain, created, asking, refusal, updated, ended

    extensions, plain, created, asking, refusal, updated, ended = run(
        f"{portal.url}/mcp/demo/", token, "2026-07-28", work, elicitation_callback=on_elicit, **declaring_tasks()
    )
    assert EXTENSION in extensions
    # A call that does not keep the client waiting is answered as usual.
    assert plain["resultType"] == "complete" and plain["content"][0]["text"] == "at once"
    call = ToolCall.objects.get(tool="research")
    assert created["resultType"] == "task" and MODERN_TASK_KEYS <= set(created)
    assert created["taskId"] == str(call.id) and created["ttlMs"] is None and created["pollIntervalMs"] == 1000
    assert asking["status"] == "input_required"
    (key, request), *_ = asking["inputRequests"].items()
    assert key.startswith("elicitation:") and request["method"] == "elicitation/create"
    assert request["params"]["message"] == "Which angle on reefs?"
    assert refusal.code == -32602 and "does not match the form" in refusal.message
    assert updated["resultType"] == "complete"
    assert ended["status"] == "completed", ended
    assert ended["result"]["content"][0]["text"] == "Report on reefs (science): 2 steps done."
    call.refresh_from_db()
    assert (call.status, call.as_task) == ("succeeded", True)


def test_a_held_call_is_a_task_at_once_for_a_2026_client(portal, alice, demo):
    from servers.models import Effect, PermissionRule
    from sessions import actions
    from sessions.models import Approval, ApprovalState

    PermissionRule.objects.create(team=demo.team, pattern="mcp__demo__echo", effect=Effect.ASK)
    token = token_for(alice)

    def allow_once() -> None:  # the person, in the inbox
        approval = Approval.objects.get(state=ApprovalState.PENDING)
        actions.do_answer_approval(alice, approval.pk, "allow_once")

    async def work(client):
        created = await send(client, "tools/call", {"name": "echo", "arguments": {"message": "may I?"}})
        task_id = created["taskId"]
        held = await send(client, "tasks/get", {"taskId": task_id}, task_id)
        await asyncio.to_thread(allow_once)
        ended = (await poll(client, task_id, lambda t: t["status"] != "working"))[-1]
        return created, held, ended

    created, held, ended = run(f"{portal.url}/mcp/demo/", token, "2026-07-28", work, **declaring_tasks())
    assert created["resultType"] == "task"
    assert (held["status"], held["statusMessage"]) == ("working", "Waiting for your approval in the MCP Portal.")
    assert ended["status"] == "completed" and ended["result"]["content"][0]["text"] == "may I?"

    # A request that does not declare the extension may not follow tasks (SEP-2133's -32021).
    async def undeclared(client):
        return await refused(send(client, "tasks/get", {"taskId": created["taskId"]}, created["taskId"]))

    assert run(f"{portal.url}/mcp/demo/", token, "2026-07-28", undeclared).code == -32021


@pytest.mark.parametrize("mode", ERAS)
def test_tasks_cancel_ends_the_call_cancelled(portal, alice, demo, mode):
    from sessions.models import ToolCall

    token = token_for(alice)
    options = declaring_tasks() if mode != "legacy" else {}

    async def work(client):
        params: dict[str, Any] = {"name": "research", "arguments": {"topic": "storms", "steps": 20}}
        if mode == "legacy":
            params["task"] = {"ttl": 60000}
        created = await send(client, "tools/call", params)
        task_id = created["task"]["taskId"] if mode == "legacy" else created["taskId"]
        # Running on the server: the worker holds the upstream server's own task.
        await poll(client, task_id, lambda t: t["statusMessage"].startswith("Step 1 of 20"))
        cancelled = await send(client, "tasks/cancel", {"taskId": task_id}, task_id)
        seen = await send(client, "tasks/get", {"taskId": task_id}, task_id)
        again = await refused(send(client, "tasks/cancel", {"taskId": task_id}, task_id)) if mode == "legacy" else None
        gone = await refused(send(client, "tasks/result", {"taskId": task_id})) if mode == "legacy" else None
        return cancelled, seen, again, gone

    cancelled, seen, again, gone = run(f"{portal.url}/mcp/demo/", token, mode, work, **options)
    call = ToolCall.objects.get(tool="research")
    assert call.status == "cancelled", (call.status, call.error)
    assert seen["status"] == "cancelled"
    if mode == "legacy":
        assert cancelled["status"] == "cancelled" and cancelled["taskId"] == str(call.id)
        assert again.code == -32602 and "already cancelled" in again.message
        assert "cancelled" in gone.message
    else:
        assert cancelled == {"resultType": "complete", "_meta": cancelled["_meta"]}


@pytest.mark.parametrize("mode", ERAS)
def test_another_persons_task_reads_as_no_task(portal, alice, bob, demo, mode):
    """bob's token, and alice's own token limited to another server, asking for alice's task by its id:
    every tasks/* request answers -32602 "Task not found", exactly as for an id nobody has; nothing
    of it is listed, and bob's cancel leaves it running."""
    from servers.models import Server
    from sessions.models import ToolCall

    other = Server.objects.create(
        team=demo.team, name="other", transport="stdio", command="x", created_by=alice, tools=[{"name": "t"}]
    )
    alices, bobs, limited = token_for(alice), token_for(bob), token_for(alice, servers=[other])
    options = declaring_tasks() if mode != "legacy" else {}
    unknown = "00000000-0000-4000-8000-000000000000"

    async def start(client):
        params: dict[str, Any] = {"name": "research", "arguments": {"topic": "secrets", "steps": 20}}
        if mode == "legacy":
            params["task"] = {"ttl": 60000}
        created = await send(client, "tools/call", params)
        return created["task"]["taskId"] if mode == "legacy" else created["taskId"]

    task_id = run(f"{portal.url}/mcp/demo/", alices, mode, start, **options)

    async def attack(client):
        answers = {}
        for name in (task_id, unknown, "not-a-uuid"):
            asked = {"taskId": name}
            answers[name] = [
                await refused(send(client, "tasks/get", asked, name)),
                await refused(send(client, "tasks/cancel", asked, name)),
            ]
            if mode == "legacy":
                answers[name].append(await refused(send(client, "tasks/result", asked)))
            else:
                update = {**asked, "inputResponses": {"elicitation:x": {"action": "decline"}}}
                answers[name].append(await refused(send(client, "tasks/update", update, name)))
        listed = await send(client, "tasks/list", {}) if mode == "legacy" else None
        return answers, listed

    for url, token in (
        (f"{portal.url}/mcp/demo/", bobs),
        (f"{portal.url}/mcp/", bobs),
        (f"{portal.url}/mcp/", limited),
    ):
        answers, listed = run(url, token, mode, attack, **options)
        for name, errors in answers.items():
            assert [(e.code, e.message) for e in errors] == [(-32602, "Task not found")] * 3, (url, name, errors)
        if mode == "legacy":
            assert listed["tasks"] == []

    # Alice's own token reads it, on the aggregate endpoint too; bob's cancel left it running.
    async def own(client):
        seen = await send(client, "tasks/get", {"taskId": task_id}, task_id)
        listed = await send(client, "tasks/list", {}) if mode == "legacy" else None
        await send(client, "tasks/cancel", {"taskId": task_id}, task_id)  # done with it
        return seen, listed

    seen, listed = run(f"{portal.url}/mcp/", alices, mode, own, **options)
    assert seen["taskId"] == task_id and seen["status"] == "working"
    if mode == "legacy":
        assert [t["taskId"] for t in listed["tasks"]] == [task_id]
    call = ToolCall.objects.get(pk=task_id)
    assert call.user == alice and call.status == "cancelled"
