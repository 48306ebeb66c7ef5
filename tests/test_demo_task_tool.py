"""The demo server's `research` tool as an MCP task, on the wire, in both protocol eras.

Plain JSON-RPC over Streamable HTTP (httpx, no SDK client, no portal), so what is checked is what a
client receives: 2025-11-25 (the handshake era: `params.task`, tasks/get, tasks/result carrying the
task's elicitation, tasks/cancel, tasks/list) and 2026-07-28 (the tasks extension: `resultType: "task"`,
tasks/get with inputRequests and the result, tasks/update, tasks/cancel).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from sessions.mcp.demo_server import ANGLE_SCHEMA
from tests.conftest import serving

HANDSHAKE = "2025-11-25"
MODERN = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
HANDSHAKE_TASK_KEYS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
MODERN_TASK_KEYS = {"taskId", "status", "statusMessage", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}
ids = itertools.count(1)


def _messages(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON-RPC messages of one POST's answer: a JSON body, or the events of an SSE stream as they come."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        response.read()
        yield response.json()
        return
    data: list[str] = []
    for line in response.iter_lines():
        if line.startswith("data:"):
            data.append(line[5:].strip())
        elif not line and data:
            yield json.loads("\n".join(data))
            data = []


def _eventually(look: Callable[[], dict[str, Any]], until: Callable[[dict[str, Any]], bool], seconds: float = 5):
    """Poll `look` until `until` holds; every answer seen on the way, the last one last."""
    seen = []
    deadline = time.monotonic() + seconds
    while True:
        seen.append(look())
        if until(seen[-1]):
            return seen
        assert time.monotonic() < deadline, f"not reached in {seconds} s; last seen: {seen[-1]}"
        time.sleep(0.03)


class Handshake:
    """One 2025-11-25 session: initialize, then requests carrying its Mcp-Session-Id."""

    def __init__(self, url: str, elicitation: bool = True) -> None:
        self.url = url
        self.http = httpx.Client(timeout=10)
        capabilities = {"elicitation": {"form": {}}} if elicitation else {}
        opened = self.http.post(url, headers=ACCEPT, json=self._request("initialize", {
            "protocolVersion": HANDSHAKE, "capabilities": capabilities, "clientInfo": {"name": "test", "version": "1"},
        }))  # fmt: skip
        self.initialized = next(_messages(opened))["result"]
        self.headers = {**ACCEPT, "Mcp-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": HANDSHAKE}
        self.http.post(url, headers=self.headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

    @staticmethod
    def _request(method: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": next(ids), "method": method, "params": params}

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response message (with `result` or `error`)."""
        with self.stream(method, params) as messages:
            return next(message for message in messages if "id" in message and "method" not in message)

    def result(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.send(method, params)
        assert "result" in response, response
        return response["result"]

    @contextmanager
    def stream(self, method: str, params: dict[str, Any] | None = None) -> Iterator[Iterator[dict[str, Any]]]:
        with self.http.stream("POST", self.url, headers=self.headers, json=self._request(method, params or {})) as r:
            yield _messages(r)

    def answer(self, request_id: Any, result: dict[str, Any]) -> None:
        """Answer a request the server sent (elicitation/create)."""
        reply = self.http.post(
            self.url, headers=self.headers, json={"jsonrpc": "2.0", "id": request_id, "result": result}
        )
        assert reply.status_code == 202

    def close(self) -> None:
        self.http.delete(self.url, headers=self.headers)
        self.http.close()


class Modern:
    """2026-07-28 requests: each one a POST of its own, with the per-request envelope and routing headers."""

    def __init__(self, url: str, tasks: bool = True) -> None:
        self.url = url
        self.http = httpx.Client(timeout=10)
        self.capabilities = {"extensions": {TASKS_EXTENSION: {}}} if tasks else {}

    def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        params = params or {}
        headers = {**ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": method}
        # The tasks extension routes tasks/* by task (Mcp-Name = taskId), as tools/call by tool name.
        name = params.get("taskId") or params.get("name")
        if name:
            headers["Mcp-Name"] = name
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        }
        message = {"jsonrpc": "2.0", "id": next(ids), "method": method, "params": {**params, "_meta": meta}}
        with self.http.stream("POST", self.url, headers=headers, json=message) as response:
            return next(m for m in _messages(response) if "id" in m and "method" not in m)

    def result(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.send(method, params)
        assert "result" in response, response
        return response["result"]

    def close(self) -> None:
        self.http.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The demo server over Streamable HTTP, writing what it cancelled to a file (DEMO_EVENT_LOG)."""
    events = tmp_path_factory.mktemp("demo-events") / "events"
    events.touch()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DEMO_EVENT_LOG", str(events))
        with serving("sessions.mcp.demo_server", "http") as port:
            yield f"http://127.0.0.1:{port}/mcp", events


@pytest.fixture
def url(demo: tuple[str, Path]) -> str:
    return demo[0]


@pytest.fixture
def handshake(url: str) -> Iterator[Handshake]:
    session = Handshake(url)
    yield session
    session.close()


@pytest.fixture
def modern(url: str) -> Iterator[Modern]:
    client = Modern(url)
    yield client
    client.close()


def _stopped(events: Path, topic: str) -> None:
    """The work itself was cancelled (research writes this when its asyncio task is), not only its status."""
    _eventually(lambda: {"log": events.read_text()}, lambda got: f"research on {topic} cancelled at step" in got["log"])


def research(topic: str = "tides", **arguments: Any) -> dict[str, Any]:
    return {"name": "research", "arguments": {"topic": topic, "step_seconds": 0.05, **arguments}}


# -- 2025-11-25 ------------------------------------------------------------------------------------


def test_handshake_the_server_offers_tasks_and_research_takes_them(handshake):
    assert handshake.initialized["capabilities"]["tasks"] == {
        "list": {},
        "cancel": {},
        "requests": {"tools": {"call": {}}},
    }
    tools = {tool["name"]: tool for tool in handshake.result("tools/list")["tools"]}
    assert tools["research"]["execution"] == {"taskSupport": "optional"}
    assert tools["research"]["title"] == "Research a topic (runs as a task)"
    assert "execution" not in tools["echo"]
    refused = handshake.send("tools/call", {"name": "echo", "arguments": {"message": "hi"}, "task": {"ttl": 1000}})
    assert refused["error"]["code"] == -32601  # a tool without taskSupport, called as a task


def test_handshake_a_task_reports_each_step_then_gives_its_result(handshake):
    created = handshake.result("tools/call", {**research(steps=3, step_seconds=0.2), "task": {"ttl": 60_000}})
    task = created["task"]
    assert set(created) == {"task"} and set(task) == HANDSHAKE_TASK_KEYS
    assert (task["status"], task["ttl"], task["pollInterval"]) == ("working", 60_000, 500)

    def look() -> dict[str, Any]:
        return handshake.result("tasks/get", {"taskId": task["taskId"]})

    seen = _eventually(look, lambda got: got["status"] == "completed")
    messages = [got["statusMessage"] for got in seen if got["status"] == "working"]
    assert {"Step 2 of 3: reading", "Step 3 of 3: taking notes"} <= set(messages)
    assert set(seen[0]) == HANDSHAKE_TASK_KEYS

    result = handshake.result("tasks/result", {"taskId": task["taskId"]})
    assert result["content"] == [{"type": "text", "text": "Report on tides (general): 3 steps done."}]
    assert result["structuredContent"] == {"topic": "tides", "angle": "general", "steps": 3}
    assert result["_meta"][RELATED_TASK] == {"taskId": task["taskId"]}
    assert task["taskId"] in [listed["taskId"] for listed in handshake.result("tasks/list")["tasks"]]


def _answer_on_the_result_stream(session: Handshake, task_id: str, answer: dict[str, Any]) -> dict[str, Any]:
    """tasks/result: the task's question arrives on its stream; answer it, then read on to the result."""
    with session.stream("tasks/result", {"taskId": task_id}) as messages:
        asked = next(messages)
        assert asked["method"] == "elicitation/create"
        assert asked["params"]["_meta"][RELATED_TASK] == {"taskId": task_id}
        assert asked["params"]["message"] == "Which angle on tides?"
        assert asked["params"]["requestedSchema"] == ANGLE_SCHEMA
        session.answer(asked["id"], answer)
        return next(messages)


def test_handshake_the_question_comes_on_the_tasks_result_stream(handshake):
    task_id = handshake.result("tools/call", {**research(steps=2, ask=True), "task": {"ttl": 60_000}})["task"]["taskId"]
    waiting = _eventually(
        lambda: handshake.result("tasks/get", {"taskId": task_id}), lambda got: got["status"] == "input_required"
    )[-1]
    assert waiting["statusMessage"] == "Waiting for an answer: Which angle on tides?"

    response = _answer_on_the_result_stream(handshake, task_id, {"action": "accept", "content": {"angle": "history"}})
    assert response["result"]["structuredContent"] == {"topic": "tides", "angle": "history", "steps": 2}
    assert response["result"]["_meta"][RELATED_TASK] == {"taskId": task_id}


def test_handshake_a_new_session_follows_a_task_another_session_made(url):
    first = Handshake(url)
    task_id = first.result("tools/call", {**research(steps=2, ask=True), "task": {}})["task"]["taskId"]
    first.close()  # the session that made it is gone, as after a portal worker's restart

    second = Handshake(url)
    try:
        got = second.result("tasks/get", {"taskId": task_id})
        assert got["ttl"] == 10 * 60 * 1000  # no ttl asked for: the default
        assert task_id in [listed["taskId"] for listed in second.result("tasks/list")["tasks"]]
        response = _answer_on_the_result_stream(second, task_id, {"action": "decline"})
        assert response["result"]["content"][0]["text"] == "Report on tides (general): 2 steps done."
    finally:
        second.close()


def test_handshake_cancel_stops_the_work_and_the_task_stays_cancelled(demo):
    url, events = demo
    session = Handshake(url)
    try:
        created = session.result("tools/call", {**research("cancelling", steps=20, step_seconds=0.2), "task": {}})
        task_id = created["task"]["taskId"]
        _eventually(
            lambda: session.result("tasks/get", {"taskId": task_id}), lambda got: "Step 2" in got["statusMessage"]
        )
        cancelled = session.result("tasks/cancel", {"taskId": task_id})
        assert set(cancelled) == HANDSHAKE_TASK_KEYS and cancelled["status"] == "cancelled"
        _stopped(events, "cancelling")

        assert session.result("tasks/get", {"taskId": task_id}) == cancelled
        assert session.send("tasks/cancel", {"taskId": task_id})["error"]["code"] == -32602  # already terminal
        assert session.send("tasks/result", {"taskId": task_id})["error"]["code"] == -32602  # no result to give
        assert session.send("tasks/get", {"taskId": "no-such-task"})["error"]["code"] == -32602
        assert session.send("tasks/update", {"taskId": task_id, "inputResponses": {}})["error"]["code"] == -32601
    finally:
        session.close()


def test_handshake_a_task_is_kept_until_its_ttl_and_no_longer(handshake):
    capped = handshake.result("tools/call", {**research(steps=1), "task": {"ttl": 10**9}})["task"]
    assert capped["ttl"] == 60 * 60 * 1000  # at most an hour, whatever is asked

    task = handshake.result("tools/call", {**research(steps=1), "task": {"ttl": 1000}})["task"]
    _eventually(lambda: handshake.result("tasks/get", {"taskId": task["taskId"]}), lambda g: g["status"] == "completed")
    time.sleep(0.3)
    assert handshake.result("tasks/result", {"taskId": task["taskId"]})["structuredContent"]["steps"] == 1
    time.sleep(1.0)  # the TTL, counted from creation, has run out
    gone = handshake.send("tasks/get", {"taskId": task["taskId"]})
    assert gone["error"]["code"] == -32602


def test_handshake_without_a_task_research_runs_inline_and_asks_on_its_own_stream(handshake):
    plain = handshake.result("tools/call", research(steps=2))
    assert plain["content"][0]["text"] == "Report on tides (general): 2 steps done." and "task" not in plain

    with handshake.stream("tools/call", research(steps=2, ask=True)) as messages:
        asked = next(messages)
        assert asked["method"] == "elicitation/create" and asked["params"]["requestedSchema"] == ANGLE_SCHEMA
        assert RELATED_TASK not in asked["params"].get("_meta", {})  # no task here
        handshake.answer(asked["id"], {"action": "accept", "content": {"angle": "people"}})
        response = next(messages)
    assert response["result"]["structuredContent"] == {"topic": "tides", "angle": "people", "steps": 2}


# -- 2026-07-28 ------------------------------------------------------------------------------------


def test_modern_the_server_offers_the_tasks_extension(modern):
    discovered = modern.result("server/discover")
    assert discovered["capabilities"]["extensions"][TASKS_EXTENSION] == {}
    assert "tasks" not in discovered["capabilities"]  # the handshake era's capability


def test_modern_a_task_reports_each_step_and_tasks_get_carries_the_result(modern, url):
    created = modern.result("tools/call", research(steps=3, step_seconds=0.2))
    assert set(created) - {"_meta"} == MODERN_TASK_KEYS | {"resultType"}
    assert (created["resultType"], created["status"], created["ttlMs"], created["pollIntervalMs"]) == (
        "task",
        "working",
        10 * 60 * 1000,
        500,
    )
    task_id = created["taskId"]
    seen = _eventually(
        lambda: modern.result("tasks/get", {"taskId": task_id}), lambda got: got["status"] == "completed"
    )
    assert {"Step 2 of 3: reading", "Step 3 of 3: taking notes"} <= {got["statusMessage"] for got in seen}
    assert all(got["resultType"] == "complete" for got in seen)
    assert not any("result" in got for got in seen[:-1])
    assert seen[-1]["result"]["structuredContent"] == {"topic": "tides", "angle": "general", "steps": 3}
    assert seen[-1]["result"]["content"] == [{"type": "text", "text": "Report on tides (general): 3 steps done."}]

    # Another client, another connection: the same task.
    other = Modern(url)
    try:
        assert other.result("tasks/get", {"taskId": task_id})["result"] == seen[-1]["result"]
    finally:
        other.close()


def test_modern_the_question_is_an_input_request_answered_by_tasks_update(modern, url):
    task_id = modern.result("tools/call", research(steps=3, step_seconds=0.2, ask=True))["taskId"]
    waiting = _eventually(
        lambda: modern.result("tasks/get", {"taskId": task_id}), lambda got: got["status"] == "input_required"
    )[-1]
    assert waiting["inputRequests"] == {
        "elicitation-1": {
            "method": "elicitation/create",
            "params": {"mode": "form", "message": "Which angle on tides?", "requestedSchema": ANGLE_SCHEMA},
        }
    }

    # Answered from another connection: tasks/update acknowledges, the task goes on with the answer.
    other = Modern(url)
    try:
        acked = other.result(
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {"elicitation-1": {"action": "accept", "content": {"angle": "science"}}},
            },
        )
        assert acked["resultType"] == "complete" and set(acked) <= {"resultType", "_meta"}
    finally:
        other.close()
    seen = _eventually(
        lambda: modern.result("tasks/get", {"taskId": task_id}), lambda got: got["status"] == "completed"
    )
    assert seen[0]["status"] == "working" and "inputRequests" not in seen[0]
    assert seen[-1]["result"]["structuredContent"] == {"topic": "tides", "angle": "science", "steps": 3}


def test_modern_cancel_stops_the_work_and_the_errors(demo):
    url, events = demo
    client = Modern(url)
    try:
        task_id = client.result("tools/call", research("stopping", steps=20, step_seconds=0.2))["taskId"]
        acked = client.result("tasks/cancel", {"taskId": task_id})
        assert acked["resultType"] == "complete" and set(acked) <= {"resultType", "_meta"}
        got = client.result("tasks/get", {"taskId": task_id})
        assert got["status"] == "cancelled" and "result" not in got
        _stopped(events, "stopping")

        assert client.send("tasks/get", {"taskId": "no-such-task"})["error"]["code"] == -32602
        assert client.send("tasks/result", {"taskId": task_id})["error"]["code"] == -32601  # not in this era
        assert client.send("tasks/list")["error"]["code"] == -32601
    finally:
        client.close()
    undeclared = Modern(url, tasks=False)
    try:
        refused = undeclared.send("tasks/get", {"taskId": task_id})
        assert refused["error"]["code"] == -32021
        assert refused["error"]["data"]["requiredCapabilities"] == {"extensions": {TASKS_EXTENSION: {}}}
    finally:
        undeclared.close()


def test_modern_without_the_extension_research_runs_inline(url):
    client = Modern(url, tasks=False)
    try:
        # No server-to-client requests in this era: asked for an angle, it has nobody to ask.
        result = client.result("tools/call", research(steps=2, ask=True))
    finally:
        client.close()
    assert result["resultType"] == "complete" and "taskId" not in result
    assert result["content"] == [{"type": "text", "text": "Report on tides (general): 2 steps done."}]
    assert result["structuredContent"] == {"topic": "tides", "angle": "general", "steps": 2}
