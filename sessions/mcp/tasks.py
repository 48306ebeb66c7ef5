"""A tool call the server runs as an MCP task, followed to its end (docs/tasks-and-apps.md).

Two protocols, one loop (`follow`):
- the handshake era's tasks (2025-11-25, experimental): the client asks for a task (`task` in the
  `tools/call` params) when the tool's `execution.taskSupport` allows it; it polls `tasks/get`, and
  `tasks/result` both waits for the result and carries the server's requests (a form to fill) while
  the task is `input_required`;
- the 2026-07-28 tasks extension (`io.modelcontextprotocol/tasks`): the client declares it on every
  call and the server decides; `tasks/get` carries the status, the input requests and the result,
  and `tasks/update` answers the input requests.

The SDK defines the types of both but sends neither (mcp 2.3.0: "types-only, never dispatched"), so
the requests go out through the session's own stamping and dispatcher (`send`): the SDK's typed
`send_request` would validate a task handle as a `CallToolResult`, and fail. Re-check on upgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol

import anyio
from mcp import types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value
from pydantic import ConfigDict, TypeAdapter

from .failure import Failure

EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK = "io.modelcontextprotocol/related-task"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
# What the portal asks a server to keep a task for (handshake era; the server may keep it less).
REQUESTED_TTL_MS = 60 * 60 * 1000
# Between two polls, whatever the server suggests: not so often it is a load, not so seldom a
# person waits on a finished task.
MIN_POLL_SECONDS, MAX_POLL_SECONDS, DEFAULT_POLL_SECONDS = 0.2, 10.0, 1.0
# How long a stopped call waits for the server to hear `tasks/cancel`.
CANCEL_SECONDS = 5.0


@dataclass
class TaskState:
    """What the portal knows of one task: its id, where it stands, and for how long it is kept."""

    id: str
    status: str
    message: str = ""
    ttl_ms: int | None = None
    poll_ms: int | None = None
    created_at: str = ""
    updated_at: str = ""
    era: str = ""  # "legacy" (the handshake era's tasks) or "modern" (the 2026 extension)

    @classmethod
    def from_wire(cls, data: dict[str, Any], era: str) -> TaskState:
        """A Task as either era sends it (`ttl`/`pollInterval`, or `ttlMs`/`pollIntervalMs`)."""

        def number(*names: str) -> int | None:
            for name in names:
                value = data.get(name)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    return int(value)
            return None

        task_id, status = data.get("taskId"), data.get("status")
        if not isinstance(task_id, str) or not task_id or not isinstance(status, str):
            raise ValueError("the server's task has no taskId or status")
        message = data.get("statusMessage")
        return cls(
            id=task_id[:200],
            status=status[:40],
            message=message[:2000] if isinstance(message, str) else "",
            ttl_ms=number("ttlMs", "ttl"),
            poll_ms=number("pollIntervalMs", "pollInterval"),
            created_at=str(data.get("createdAt") or "")[:40],
            updated_at=str(data.get("lastUpdatedAt") or "")[:40],
            era=era,
        )

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def poll_seconds(self) -> float:
        if self.poll_ms is None:
            return DEFAULT_POLL_SECONDS
        return min(max(self.poll_ms / 1000, MIN_POLL_SECONDS), MAX_POLL_SECONDS)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class TaskEnded(Exception):
    """The task ended without a tool result: failed (the server's JSON-RPC error), cancelled, or
    lost (the server no longer knows it). The pool turns it into the call's failure."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure


# The person's answer to one server request, in the client callbacks' own shapes.
AnswerInput = Callable[[str, Any], Awaitable[Any]]
TaskSink = Callable[[dict[str, Any]], Awaitable[None]]


class Follower(Protocol):
    """What `follow` needs of a task's protocol: one of `LegacyTasks`, `ModernTasks`."""

    era: str

    async def get(self, task_id: str) -> dict[str, Any]: ...
    async def give_input(self, task_id: str, seen: dict[str, Any]) -> None: ...
    async def result(self, task: TaskState, seen: dict[str, Any]) -> types.CallToolResult: ...
    async def cancel(self, task_id: str) -> dict[str, Any]: ...
    def close(self) -> None: ...


async def send(
    session: Any, method: str, params: dict[str, Any], *, task_id: str | None = None, timeout: float | None = None
) -> dict[str, Any]:
    """One request the SDK has no method for, stamped as the session stamps its own (the 2026 era's
    per-request `_meta`); `Mcp-Name` carries the task id, which the extension requires on HTTP."""
    data: dict[str, Any] = {"method": method, "params": params}
    opts: dict[str, Any] = {}
    session._stamp(data, opts)
    if task_id is not None:
        opts.setdefault("headers", {})[MCP_NAME_HEADER] = encode_header_value(task_id)
    if timeout is not None:
        opts["timeout"] = timeout
    return await session._dispatcher.send_raw_request(method, data.get("params"), opts)


def _tool_result(data: Any) -> types.CallToolResult:
    if not isinstance(data, dict):
        raise TaskEnded(Failure("protocol", "The server's finished task carries no tool result."))
    return types.CallToolResult.model_validate(data, by_name=False)


def _gone(task_id: str, exc: MCPError) -> TaskEnded:
    return TaskEnded(Failure("task_lost", f"The server no longer knows task {task_id}: {exc.error.message}"[:2000]))


def _ended(task: TaskState, error: dict[str, Any] | None = None) -> TaskEnded:
    if task.status == "cancelled":
        return TaskEnded(Failure("cancelled", task.message or "The task was cancelled."))
    message = (error or {}).get("message") if isinstance(error, dict) else None
    return TaskEnded(Failure("task_failed", str(message or task.message or "The task failed.")[:2000]))


class LegacyTasks:
    """The handshake era's tasks: `tasks/result` waits for the end and carries the server's requests."""

    era = "legacy"

    def __init__(self, session: Any, seconds: float):
        self.session, self.seconds = session, seconds
        self._waiting: asyncio.Future[dict[str, Any]] | None = None

    async def create(self, tool: str, arguments: dict[str, Any]) -> TaskState | types.CallToolResult:
        params = {"name": tool, "arguments": arguments, "task": {"ttl": REQUESTED_TTL_MS}}
        with anyio.fail_after(self.seconds):
            raw = await send(self.session, "tools/call", params)
        if isinstance(raw.get("task"), dict):
            return TaskState.from_wire(raw["task"], self.era)
        return _tool_result(raw)  # a server may run it at once after all

    async def get(self, task_id: str) -> dict[str, Any]:
        try:
            with anyio.fail_after(self.seconds):
                return await send(self.session, "tasks/get", {"taskId": task_id})
        except MCPError as exc:
            raise _gone(task_id, exc) from exc

    async def give_input(self, task_id: str, seen: dict[str, Any]) -> None:
        # The server sends its requests while a `tasks/result` is open; they reach the connection's
        # callbacks like any other. Opened once; it ends with the task.
        if self._waiting is None:
            self._waiting = asyncio.ensure_future(send(self.session, "tasks/result", {"taskId": task_id}))

    async def result(self, task: TaskState, seen: dict[str, Any]) -> types.CallToolResult:
        if task.status != "completed":
            raise _ended(task)
        waiting, self._waiting = self._waiting, None
        try:
            if waiting is not None:
                raw = await waiting
            else:
                with anyio.fail_after(self.seconds):
                    raw = await send(self.session, "tasks/result", {"taskId": task.id})
        except MCPError as exc:
            raise TaskEnded(Failure("task_failed", exc.error.message[:2000])) from exc
        return _tool_result(raw)

    async def cancel(self, task_id: str) -> dict[str, Any]:
        return await send(self.session, "tasks/cancel", {"taskId": task_id})

    def close(self) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
            self._waiting = None


_INPUT_REQUEST: TypeAdapter[Any] = TypeAdapter(types.InputRequest)


class ModernTasks:
    """The 2026 extension: `tasks/get` carries everything; `tasks/update` answers the server."""

    era = "modern"

    def __init__(self, session: Any, seconds: float, answer: AnswerInput):
        self.session, self.seconds, self.answer = session, seconds, answer
        self._answered: set[str] = set()  # keys are unique over a task's life: each asked once

    async def get(self, task_id: str) -> dict[str, Any]:
        try:
            with anyio.fail_after(self.seconds):
                return await send(self.session, "tasks/get", {"taskId": task_id}, task_id=task_id)
        except MCPError as exc:
            raise _gone(task_id, exc) from exc

    async def give_input(self, task_id: str, seen: dict[str, Any]) -> None:
        asked = seen.get("inputRequests")
        if not isinstance(asked, dict):
            return
        responses: dict[str, Any] = {}
        for key, request in list(asked.items())[:10]:
            if not isinstance(key, str) or key in self._answered:
                continue
            self._answered.add(key)
            try:
                parsed = _INPUT_REQUEST.validate_python(request, by_name=False)
            except ValueError:
                continue  # not a request this client knows: the server hears nothing for it
            answered = await self.answer(key, parsed)
            if isinstance(answered, types.ErrorData):
                continue
            responses[key] = answered.model_dump(mode="json", by_alias=True, exclude_none=True)
        if responses:
            params = {"taskId": task_id, "inputResponses": responses}
            with anyio.fail_after(self.seconds):
                await send(self.session, "tasks/update", params, task_id=task_id)

    async def result(self, task: TaskState, seen: dict[str, Any]) -> types.CallToolResult:
        if task.status != "completed":
            raise _ended(task, seen.get("error"))
        return _tool_result(seen.get("result"))

    async def cancel(self, task_id: str) -> dict[str, Any]:
        return await send(self.session, "tasks/cancel", {"taskId": task_id}, task_id=task_id)

    def close(self) -> None:
        pass


async def follow(
    follower: Follower,
    task: TaskState,
    on_task: TaskSink | None,
    cancel_on_stop: Callable[[], bool],
    seen: dict[str, Any] | None = None,
) -> types.CallToolResult:
    """Poll the task at the pace the server asks until it ends, answering what it asks on the way,
    and return its tool result (or raise TaskEnded). Each poll is bounded by the request timeout;
    the task as a whole by its TTL, which is the server's to enforce. Stopped from outside (the
    person's Cancel), the server hears `tasks/cancel`, unless `cancel_on_stop` says to leave the
    task running for the next worker to resume."""
    last: tuple[str, str] | None = None
    seen = seen or {}
    try:
        while True:
            if (task.status, task.message) != last:
                last = (task.status, task.message)
                if on_task is not None:
                    await on_task(task.as_dict())
            if task.terminal:
                return await follower.result(task, seen)
            if task.status == "input_required":
                await follower.give_input(task.id, seen)
            await anyio.sleep(task.poll_seconds)
            seen = await follower.get(task.id)
            try:
                task = TaskState.from_wire(seen, follower.era)
            except ValueError as exc:
                raise TaskEnded(Failure("protocol", f"The server's task could not be read: {exc}")) from exc
    except anyio.get_cancelled_exc_class():
        if not task.terminal and cancel_on_stop():
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_SECONDS):
                with contextlib.suppress(Exception):
                    answer = await follower.cancel(task.id)
                    if "status" in answer and on_task is not None:
                        # The handshake era answers with the task itself: the server's word on it.
                        await on_task(TaskState.from_wire(answer, follower.era).as_dict())
        raise
    finally:
        follower.close()


class CreatedTask(types.Result):
    """A 2026 server's task handle in place of a tool result (`resultType: "task"`)."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"  # type: ignore[assignment]

    def as_wire(self) -> dict[str, Any]:
        return {**(self.model_extra or {}), **self.model_dump(mode="json", by_alias=True, exclude_none=True)}


class TasksExtension(ClientExtension):
    """Declares the tasks extension on every 2026 call, and follows a task a server answers with
    (`resolve`, given by the connection: it knows the call being served)."""

    identifier = EXTENSION

    def __init__(self, resolve: Callable[[CreatedTask, ClaimContext], Awaitable[types.CallToolResult]]):
        self._resolve = resolve

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]


def server_runs_tool_tasks(capabilities: Any) -> bool:
    """Whether a handshake-era server said it runs `tools/call` as tasks."""
    tasks = getattr(capabilities, "tasks", None)
    requests = getattr(tasks, "requests", None)
    tools = getattr(requests, "tools", None)
    return getattr(tools, "call", None) is not None
