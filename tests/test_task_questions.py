"""A question a handshake-era server asks for a task (an elicitation during `tasks/result`) reaches the
call following that task, by the task it names (`io.modelcontextprotocol/related-task`), even with a
newer call of the same person in flight on the same connection."""

from __future__ import annotations

import asyncio

from sessions.mcp.config import ConnectionKey
from sessions.mcp.pool import CallHooks
from tests.helpers import stdio_demo


def test_a_tasks_question_goes_to_the_call_following_it(pool):
    # Over stdio the server's request arrives on the session's receive loop, outside every call's task.
    config = stdio_demo(protocol="legacy")
    key = ConnectionKey.for_owner(1, config, "user:1")
    asked: dict[str, list[str]] = {"asking": [], "newer": []}

    def hooks(name: str) -> CallHooks:
        async def on_elicit(message: str, schema: dict, request_id: str) -> dict:
            asked[name].append(message)
            return {"action": "accept", "content": {"angle": "science"}}

        return CallHooks(on_elicit=on_elicit)

    async def scenario():
        await pool.list_tools(key, config)  # connected first, so the calls go in flight in the order made
        slow = {"topic": "tides", "steps": 1, "step_seconds": 1.0, "ask": True}
        asking = asyncio.ensure_future(
            pool.call_tool(key, config, "research", slow, hooks=hooks("asking"), as_task=True)
        )
        await asyncio.sleep(0.3)  # the newer call is the last in flight when the question comes
        busy = {"topic": "waves", "steps": 10, "step_seconds": 0.3}
        newer = asyncio.ensure_future(pool.call_tool(key, config, "research", busy, hooks=hooks("newer"), as_task=True))
        return await asking, await newer

    asking, newer = pool.run(scenario(), timeout=60)
    assert asked == {"asking": ["Which angle on tides?"], "newer": []}
    assert asking.result["structuredContent"]["angle"] == "science", asking.failure
    assert newer.status == "succeeded", newer.failure
