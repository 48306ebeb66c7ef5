"""MCP tasks for the demo server, in both protocol eras.

A tool named here can answer `tools/call` with a task instead of its result, and the client then
follows the task with the `tasks/*` requests:

- 2025-11-25 (the handshake era, core spec SEP-1686, experimental): the client asks for a task with
  `params.task: {"ttl": ms}` on a tool listed with `execution.taskSupport`; the server advertises
  `capabilities.tasks` at `initialize` and serves `tasks/get`, `tasks/result` (which blocks until the
  task ends and carries the task's `elicitation/create` requests meanwhile), `tasks/cancel` and
  `tasks/list`.
- 2026-07-28 (the tasks extension `io.modelcontextprotocol/tasks`, SEP-2663): the client declares the
  extension in its per-request capabilities and the server decides to make a task; the client polls
  `tasks/get` (which shows the task's questions as `inputRequests`, then its `result` or `error`),
  answers with `tasks/update` and stops it with `tasks/cancel`.

The tasks live in one store for the whole server process, not per connection: a client that comes back
on a new connection (a restarted portal worker) finds its task. Each task's work is an asyncio task of
the process, so it outlives the request that started it. A real server would tie each task to the
identity that made it; the demo has no identities, so any client may follow any task.

The SDK (mcp 2.3.0) defines the task types but never dispatches them ("types-only"), so the requests are
bound here: `Tasks` is an `Extension` (its methods and its `tools/call` interceptor serve the 2026-07-28
era) and `Tasks.handshake_middleware` is a server middleware for the 2025-11-25 wire, whose results the
SDK's runner would otherwise refuse (see there).

Nothing here imports Django (sessions/mcp stays free of it).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    CallToolRequestParams,
    CallToolResult,
    CancelTaskRequestParams,
    CreateTaskResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    ErrorData,
    GetTaskPayloadRequestParams,
    GetTaskRequestParams,
    InputRequiredResult,
    ListTasksResult,
    PaginatedRequestParams,
    RequestParams,
    ServerTasksCapability,
    ServerTasksRequestsCapability,
    Task,
    TasksCallCapability,
    TasksCancelCapability,
    TasksListCapability,
    TasksToolsCapability,
    TextContent,
)
from mcp.types import methods as wire
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

logger = logging.getLogger(__name__)

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
RELATED_TASK_META_KEY = "io.modelcontextprotocol/related-task"
# Tasks entered the core spec at 2025-11-25; older handshake versions never hear of them.
HANDSHAKE_TASK_VERSIONS = frozenset({"2025-11-25"})

DEFAULT_TTL_MS = 10 * 60 * 1000
MAX_TTL_MS = 60 * 60 * 1000
# A task gone before its first poll is of no use to anyone.
MIN_TTL_MS = 1000
POLL_INTERVAL_MS = 500
LIST_PAGE_SIZE = 100

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
TERMINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})

CallTool = Callable[[str, dict[str, Any]], Awaitable[CallToolResult | InputRequiredResult]]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Work(Protocol):
    """What a task-capable tool's body talks to while it runs: the task, or the request it runs in."""

    async def report_status(self, message: str) -> None: ...

    async def elicit_form(self, message: str, requested_schema: dict[str, Any]) -> ElicitResult | None:
        """Ask the person; None when nobody can be asked here."""
        ...


class InputRequest:
    """One question a task waits on: an `elicitation/create` that the client has not answered yet."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.answer: asyncio.Future[ElicitResult] = asyncio.get_running_loop().create_future()
        # Handshake era: a `tasks/result` stream has sent it and waits for the client's answer, so
        # another stream (another connection's) must not ask the person a second time.
        self.claimed = False


class ServerTask:
    """One task: its state as both eras show it, and the `Work` its tool's body reports to."""

    def __init__(self, tool: str, ttl_ms: int, protocol_version: str) -> None:
        self.task_id = str(uuid.uuid4())
        self.tool = tool
        self.ttl_ms = ttl_ms
        # The 2025-11-25 spec counts a tool result with isError as a failed task; 2026-07-28 as completed.
        self.tool_errors_fail = protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        self.status: TaskStatus = "working"
        self.status_message = f"Started {tool}."
        self.created_at = self.last_updated_at = _now()
        self.result: dict[str, Any] | None = None  # the CallToolResult, as the SDK dumps it
        self.error: ErrorData | None = None
        self.expired = False
        self.input_requests: dict[str, InputRequest] = {}
        self.worker: asyncio.Task[None] | None = None
        self._asked = 0
        self._change = asyncio.Event()

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def next_change(self) -> asyncio.Event:
        """The event set at the next change. Take it before looking at the state, so no change is missed."""
        return self._change

    def wake(self) -> None:
        self._change.set()
        self._change = asyncio.Event()

    def _set(self, status: TaskStatus, message: str) -> None:
        self.status, self.status_message = status, message
        self.last_updated_at = _now()
        self.wake()

    # -- Work ------------------------------------------------------------------------------------

    async def report_status(self, message: str) -> None:
        if not self.terminal:
            self._set(self.status, message)

    async def elicit_form(self, message: str, requested_schema: dict[str, Any]) -> ElicitResult:
        # Keys are never reused within a task (2026-07-28: a key names one request for the task's life).
        self._asked += 1
        key = f"elicitation-{self._asked}"
        request = InputRequest({"mode": "form", "message": message, "requestedSchema": requested_schema})
        self.input_requests[key] = request
        self._set("input_required", f"Waiting for an answer: {message}")
        try:
            return await request.answer
        finally:
            del self.input_requests[key]
            if not self.terminal and not self.input_requests:
                self._set("working", "Got the answer; going on.")

    def answer(self, key: str, response: ElicitResult) -> bool:
        """Answer one outstanding question; a key not outstanding is ignored, as both specs allow."""
        request = self.input_requests.get(key)
        if request is None or request.answer.done():
            return False
        request.answer.set_result(response)
        return True

    # -- the ends ------------------------------------------------------------------------------

    def complete(self, result: CallToolResult) -> None:
        if self.terminal:
            return  # cancelled meanwhile: a cancelled task stays cancelled
        self.result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        summary = next((block.text for block in result.content if isinstance(block, TextContent)), "Done.")
        self._set("failed" if result.is_error and self.tool_errors_fail else "completed", summary)

    def fail(self, error: ErrorData) -> None:
        if not self.terminal:
            self.error = error
            self._set("failed", f"Failed: {error.message}")

    def cancel(self, message: str = "Cancelled by request.") -> bool:
        if self.terminal:
            return False
        self._set("cancelled", message)
        for request in self.input_requests.values():
            request.answer.cancel()
        # Stop the work, unless this is the work itself ending on a cancellation of its own.
        if self.worker is not None and self.worker is not asyncio.current_task():
            self.worker.cancel()
        return True

    # -- the wire ------------------------------------------------------------------------------

    def handshake_task(self) -> Task:
        """The `Task` of 2025-11-25 (`ttl`, `pollInterval`)."""
        return Task(
            task_id=self.task_id,
            status=self.status,
            status_message=self.status_message,
            created_at=self.created_at,
            last_updated_at=self.last_updated_at,
            ttl=self.ttl_ms,
            poll_interval=POLL_INTERVAL_MS,
        )

    def modern_task(self) -> dict[str, Any]:
        """The `Task` of the 2026-07-28 extension (`ttlMs`, `pollIntervalMs`); the SDK has no type for it."""
        return {
            "taskId": self.task_id,
            "status": self.status,
            "statusMessage": self.status_message,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": POLL_INTERVAL_MS,
        }

    def detailed_task(self, protocol_version: str) -> dict[str, Any]:
        """2026-07-28 `tasks/get`: the task plus what its status carries (questions, result or error)."""
        detailed = self.modern_task()
        if self.status == "input_required":
            detailed["inputRequests"] = {
                key: {"method": "elicitation/create", "params": request.params}
                for key, request in self.input_requests.items()
            }
        elif self.error is not None:
            detailed["error"] = self.error.model_dump(by_alias=True, mode="json", exclude_none=True)
        elif self.result is not None:
            detailed["result"] = wire.serialize_server_result("tools/call", protocol_version, self.result)
        return detailed


_running: ContextVar[ServerTask | None] = ContextVar("demo_running_task", default=None)


def current_task() -> ServerTask | None:
    """The task whose work is running here, if the tool was called as a task."""
    return _running.get()


class TaskStore:
    """Every task of this server process, kept until its TTL runs out."""

    def __init__(self) -> None:
        self._tasks: dict[str, ServerTask] = {}

    def start(
        self, tool: str, arguments: dict[str, Any], ttl_ms: int | None, protocol_version: str, call_tool: CallTool
    ) -> ServerTask:
        ttl = DEFAULT_TTL_MS if ttl_ms is None else max(MIN_TTL_MS, min(ttl_ms, MAX_TTL_MS))
        task = ServerTask(tool, ttl, protocol_version)
        self._tasks[task.task_id] = task
        # The task is in the store before the CreateTaskResult goes out, so a `tasks/get` that follows
        # at once finds it (2026-07-28 requires that).
        task.worker = asyncio.create_task(self._work(task, arguments, call_tool), name=f"task {task.task_id}")
        asyncio.get_running_loop().call_later(ttl / 1000, self._expire, task.task_id)
        return task

    async def _work(self, task: ServerTask, arguments: dict[str, Any], call_tool: CallTool) -> None:
        _running.set(task)  # this asyncio task's own context: the tool body finds its task here
        try:
            result = await call_tool(task.tool, arguments)
        except asyncio.CancelledError:
            task.cancel()  # a no-op when tasks/cancel was the cause
            raise
        except MCPError as exc:
            # What the request would have answered with a JSON-RPC error: the task fails with it.
            task.fail(exc.error)
        except Exception as exc:  # noqa: BLE001 - a tool's failure is its result, as in an ordinary tools/call
            # MCPServer.call_tool raises ToolError where the tools/call handler answers isError; do the same,
            # and log a crash with its cause as that handler does (the result carries only a generic text).
            if isinstance(exc, UnexpectedToolError) or not isinstance(exc, ToolError):
                logger.exception("task %s: tool %r raised an unexpected exception", task.task_id, task.tool)
            task.complete(CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True))
        else:
            if isinstance(result, InputRequiredResult):
                # A task's questions go through the task (Work.elicit_form), never as an MRTR round.
                task.fail(ErrorData(code=INTERNAL_ERROR, message="the tool asked for input outside its task"))
            else:
                task.complete(result)

    def _expire(self, task_id: str) -> None:
        task = self._tasks.pop(task_id, None)
        if task is not None:
            task.cancel("The task's TTL ran out.")
            task.expired = True
            task.wake()

    def get(self, task_id: str) -> ServerTask:
        task = self._tasks.get(task_id)
        if task is None:
            raise MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found (or its TTL ran out)")
        return task

    def all(self) -> list[ServerTask]:
        return sorted(self._tasks.values(), key=lambda task: task.created_at)


# Process-wide: every connection of this server process sees the same tasks.
STORE = TaskStore()


class UpdateTaskRequestParams(RequestParams):
    """2026-07-28 `tasks/update`: answers to the task's `inputRequests`, keyed as they were."""

    task_id: str
    input_responses: dict[str, Any]


def _modern(ctx: ServerRequestContext[Any, Any]) -> bool:
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS


def _declares_tasks(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and TASKS_EXTENSION in (capabilities.extensions or {})


def _can_elicit(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return capabilities is not None and capabilities.elicitation is not None


class Tasks(Extension):
    """Task-augmented execution of the named tools, with the `tasks/*` requests of both eras.

    Pass it to `MCPServer(extensions=[tasks], middleware=[tasks.handshake_middleware])`; `call_tool`
    runs a tool outside any request (`MCPServer.call_tool`), as the task's work.
    """

    identifier = TASKS_EXTENSION

    def __init__(self, tools: Sequence[str], call_tool: CallTool, store: TaskStore = STORE) -> None:
        self.task_tools = frozenset(tools)
        self.call_tool = call_tool
        self.store = store

    def methods(self) -> Sequence[MethodBinding]:
        handshake = frozenset(HANDSHAKE_PROTOCOL_VERSIONS)
        return (
            MethodBinding("tasks/get", GetTaskRequestParams, self._get),
            MethodBinding("tasks/cancel", CancelTaskRequestParams, self._cancel),
            # 2026-07-28 has no tasks/result (tasks/get carries the result) and no tasks/list.
            MethodBinding("tasks/result", GetTaskPayloadRequestParams, self._result, protocol_versions=handshake),
            MethodBinding("tasks/list", PaginatedRequestParams, self._list, protocol_versions=handshake),
            MethodBinding(
                "tasks/update", UpdateTaskRequestParams, self._update, protocol_versions=MODERN_PROTOCOL_VERSIONS
            ),
        )

    # -- making tasks ----------------------------------------------------------------------------

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        # 2026-07-28: the server decides, and only for a client whose request declares the extension.
        if _modern(ctx) and params.name in self.task_tools and _declares_tasks(ctx):
            task = self.store.start(params.name, params.arguments or {}, None, ctx.protocol_version, self.call_tool)
            # A `resultType` outside the core vocabulary is the extension's own shape: the runner passes
            # it through unsieved (ServerRunner._serialize, mcp/server/runner.py:374-378).
            return {"resultType": "task", **task.modern_task()}
        return await call_next(ctx)

    async def handshake_middleware(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """The 2025-11-25 wire: `capabilities.tasks`, `execution.taskSupport`, and CreateTaskResult.

        Why a middleware and not the interceptor: the runner sieves every handshake-era result of a spec
        method through that version's schema, inside the handler chain (ServerRunner._serialize,
        mcp/server/runner.py:374-381, called at runner.py:223), and the 2025-11-25 schema of `tools/call`
        is CallToolResult only (mcp_types/methods.py:289), so a CreateTaskResult from a handler or an
        interceptor becomes "-32603 Handler returned an invalid result". A middleware that answers
        without `call_next` owns its result (runner.py:225-230): so this answers only a task-augmented
        `tools/call` of a task-capable tool, at a version that has tasks, and lets every other request
        through. `initialize` and `tools/list` go through too and only gain fields: the SDK advertises
        no `capabilities.tasks` and MCPServer.list_tools sets no `execution` (mcpserver/server.py:516).
        """
        if ctx.method == "initialize":
            result = await call_next(ctx)
            if isinstance(result, dict) and result.get("protocolVersion") in HANDSHAKE_TASK_VERSIONS:
                capabilities = result.setdefault("capabilities", {})
                capabilities["tasks"] = ServerTasksCapability(
                    list=TasksListCapability(),
                    cancel=TasksCancelCapability(),
                    requests=ServerTasksRequestsCapability(tools=TasksToolsCapability(call=TasksCallCapability())),
                ).model_dump(by_alias=True, mode="json", exclude_none=True)
            return result
        if ctx.protocol_version not in HANDSHAKE_TASK_VERSIONS:
            return await call_next(ctx)
        if ctx.method == "tools/list":
            # MCPServer's tool list has no `execution`; the schema of this version does.
            result = await call_next(ctx)
            if isinstance(result, dict):
                for tool in result.get("tools", []):
                    if tool.get("name") in self.task_tools:
                        tool["execution"] = {"taskSupport": "optional"}
            return result
        params = ctx.params
        if (
            ctx.method == "tools/call"
            and isinstance(params, Mapping)
            and params.get("task") is not None
            # Before the handshake the runner's own gate must answer, so let the request through to it.
            and ctx.session.client_params is not None
        ):
            # Answering here skips the runner's params validation, so validate as it would (-32602).
            call = CallToolRequestParams.model_validate(params, by_name=False)
            if call.name not in self.task_tools:
                # SEP-1686: a tool without taskSupport called as a task SHOULD get -32601.
                raise MCPError(
                    code=METHOD_NOT_FOUND, message=f"Tool {call.name!r} does not support task-augmented execution"
                )
            ttl = call.task.ttl if call.task is not None else None
            task = self.store.start(call.name, call.arguments or {}, ttl, ctx.protocol_version, self.call_tool)
            return CreateTaskResult(task=task.handshake_task())
        return await call_next(ctx)

    # -- following tasks -------------------------------------------------------------------------

    def _task(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> ServerTask:
        if _modern(ctx):
            # 2026-07-28: tasks/get, tasks/update and tasks/cancel need the extension declared (-32021).
            require_client_extension(ctx, TASKS_EXTENSION)
        return self.store.get(task_id)

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: GetTaskRequestParams) -> HandlerResult:
        task = self._task(ctx, params.task_id)
        if _modern(ctx):
            return task.detailed_task(ctx.protocol_version)
        return task.handshake_task()  # GetTaskResult: the Task's fields at the top level

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: CancelTaskRequestParams) -> HandlerResult:
        task = self._task(ctx, params.task_id)
        cancelled = task.cancel()
        if _modern(ctx):
            # An acknowledgement only; a task that had already ended keeps its end (eventual consistency).
            return {}
        if not cancelled:
            raise MCPError(
                code=INVALID_PARAMS, message=f"Cannot cancel task: it is already {task.status}", data=task.task_id
            )
        return task.handshake_task()  # CancelTaskResult

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskRequestParams) -> HandlerResult:
        task = self._task(ctx, params.task_id)
        answers: dict[str, ElicitResult] = {}
        for key, response in params.input_responses.items():
            try:
                answers[key] = ElicitResult.model_validate(response, by_name=False)
            except ValidationError as exc:
                raise MCPError(
                    code=INVALID_PARAMS, message=f"inputResponses[{key!r}] is not an elicitation result"
                ) from exc
        # All or nothing: a malformed answer refuses the update before any answer reaches the task.
        for key, answer in answers.items():
            task.answer(key, answer)
        return {}

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams) -> HandlerResult:
        start = 0
        if params.cursor is not None:
            if not params.cursor.isdigit():
                raise MCPError(code=INVALID_PARAMS, message="Invalid cursor")
            start = int(params.cursor)
        tasks = self.store.all()
        end = start + LIST_PAGE_SIZE
        return ListTasksResult(
            tasks=[task.handshake_task() for task in tasks[start:end]],
            next_cursor=str(end) if end < len(tasks) else None,
        )

    async def _result(self, ctx: ServerRequestContext[Any, Any], params: GetTaskPayloadRequestParams) -> HandlerResult:
        """2025-11-25 `tasks/result`: wait for the end, asking the task's questions on this stream meanwhile."""
        task = self._task(ctx, params.task_id)
        while True:
            change = task.next_change()
            if task.expired:
                raise MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task has expired")
            if task.terminal:
                break
            waiting = next(
                ((key, request) for key, request in task.input_requests.items() if not request.claimed), None
            )
            if waiting is not None:
                await self._ask(ctx, task, *waiting)
            else:
                await change.wait()
        if task.status == "cancelled":
            raise MCPError(code=INVALID_PARAMS, message=f"Task {task.task_id} was cancelled; it has no result")
        if task.error is not None:
            # Exactly what the tools/call would have answered: its JSON-RPC error.
            raise MCPError.from_error_data(task.error)
        assert task.result is not None
        payload = wire.serialize_server_result("tools/call", ctx.protocol_version, task.result)
        payload["_meta"] = {**payload.get("_meta", {}), RELATED_TASK_META_KEY: {"taskId": task.task_id}}
        return payload

    async def _ask(
        self, ctx: ServerRequestContext[Any, Any], task: ServerTask, key: str, request: InputRequest
    ) -> None:
        """Send one of the task's questions to this client as `elicitation/create`, on this request's stream.

        The request carries `_meta["io.modelcontextprotocol/related-task"]`, as SEP-1686 requires of every
        message that belongs to a task; the answer goes to the task, which then works on.
        """
        if not _can_elicit(ctx):
            # A client that declared no elicitation may not be sent one: as if the person had dismissed it.
            task.answer(key, ElicitResult(action="cancel"))
            return
        request.claimed = True
        answered = False
        try:
            params = ElicitRequestFormParams(
                message=request.params["message"],
                requested_schema=request.params["requestedSchema"],
                _meta={RELATED_TASK_META_KEY: {"taskId": task.task_id}},
            )
            try:
                response = await ctx.session.send_request(
                    ElicitRequest(params=params),
                    ElicitResult,
                    metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
                )
            except (MCPError, ValidationError):
                # The client refused the request or answered nonsense: the person was not asked.
                response = ElicitResult(action="cancel")
            task.answer(key, response)
            answered = True
        finally:
            if not answered:
                # This stream went away mid-question: another tasks/result (another connection's) may ask it.
                request.claimed = False
                task.wake()
