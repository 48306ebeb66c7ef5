"""The client side of 2025-11-25 tasks (sessions/mcp/client_tasks.py): what the server hears when it
asks the portal to run its request as a task, and asks after it. The person's answer is played by
`answer` here; server-everything drives the whole path in test_server_everything_conversation.py."""

from __future__ import annotations

import asyncio

import pytest
from mcp.shared.exceptions import MCPError

from sessions.mcp.client_tasks import MAX_WORKING, ClientTasks

SAMPLING = {"task": {"ttl": 60000}, "messages": [], "maxTokens": 10}


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), 10))


def test_the_task_is_answered_at_once_and_its_result_is_the_persons_reply():
    async def scenario():
        replied = asyncio.Event()
        asked = {}

        async def answer(dctx, method, params):
            asked.update(method=method, params=params)
            await replied.wait()
            return {"role": "assistant", "content": {"type": "text", "text": "hi"}, "model": "human"}

        tasks = ClientTasks()
        created = tasks.start(answer, None, "sampling/createMessage", SAMPLING)["task"]
        await asyncio.sleep(0)
        working = await tasks.serve("tasks/get", {"taskId": created["taskId"]})
        replied.set()
        result = await tasks.serve("tasks/result", {"taskId": created["taskId"]})
        done = await tasks.serve("tasks/get", {"taskId": created["taskId"]})
        listed = await tasks.serve("tasks/list", {})
        return created, asked, working, result, done, listed

    created, asked, working, result, done, listed = run(scenario)
    assert created["status"] == "working" and created["ttl"] == 60000 and created["pollInterval"] > 0
    assert asked["method"] == "sampling/createMessage" and "task" not in asked["params"], "asked as a plain request"
    assert working["status"] == "working"
    assert result["content"]["text"] == "hi"
    assert result["_meta"]["io.modelcontextprotocol/related-task"] == {"taskId": created["taskId"]}
    assert done["status"] == "completed" and [t["taskId"] for t in listed["tasks"]] == [created["taskId"]]


def test_a_declined_request_fails_the_task_with_the_same_error():
    async def scenario():
        async def answer(dctx, method, params):
            raise MCPError(code=-1, message="The user declined the sampling request.")

        tasks = ClientTasks()
        task_id = tasks.start(answer, None, "sampling/createMessage", SAMPLING)["task"]["taskId"]
        with pytest.raises(MCPError) as refused:
            await tasks.serve("tasks/result", {"taskId": task_id})
        return refused.value, await tasks.serve("tasks/get", {"taskId": task_id})

    refused, failed = run(scenario)
    assert refused.error.code == -1 and refused.error.message == "The user declined the sampling request."
    assert failed["status"] == "failed" and failed["statusMessage"] == "The user declined the sampling request."


def test_the_server_may_cancel_a_task_and_then_its_result_is_an_error():
    async def scenario():
        stopped = asyncio.Event()

        async def answer(dctx, method, params):
            try:
                await asyncio.Event().wait()  # the person never answers
            finally:
                stopped.set()

        tasks = ClientTasks()
        task_id = tasks.start(answer, None, "elicitation/create", {"task": {}, "message": "?"})["task"]["taskId"]
        await asyncio.sleep(0)
        cancelled = await tasks.serve("tasks/cancel", {"taskId": task_id})
        await asyncio.wait_for(stopped.wait(), 5)
        errors = []
        for method in ("tasks/result", "tasks/cancel"):
            with pytest.raises(MCPError) as refused:
                await tasks.serve(method, {"taskId": task_id})
            errors.append(refused.value.error.message)
        with pytest.raises(MCPError) as unknown:
            await tasks.serve("tasks/get", {"taskId": "another-connections-task"})
        return cancelled, errors, unknown.value

    cancelled, errors, unknown = run(scenario)
    assert cancelled["status"] == "cancelled" and cancelled["ttl"] is None
    assert errors == ["The task ended cancelled.", "The task already ended (cancelled)."]
    assert unknown.error.code == -32602 and unknown.error.message == "Task not found"


def test_a_server_may_not_open_more_tasks_than_a_person_can_face():
    async def scenario():
        async def answer(dctx, method, params):
            await asyncio.Event().wait()

        tasks = ClientTasks()
        for _ in range(MAX_WORKING):
            tasks.start(answer, None, "sampling/createMessage", SAMPLING)
        with pytest.raises(MCPError) as refused:
            tasks.start(answer, None, "sampling/createMessage", SAMPLING)
        tasks.close()
        return refused.value

    assert run(scenario).error.message == f"The portal runs at most {MAX_WORKING} requests as tasks at once."
