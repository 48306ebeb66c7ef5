"""Requests a handshake-era server asks the portal to run as tasks: the 2025-11-25 client side of tasks.

A server that sees `capabilities.tasks.requests` may send `sampling/createMessage` or
`elicitation/create` with `task` in its params (server-everything's `trigger-*-async` tools). The
portal then answers at once with the task (`working`), asks the person exactly as for the same request
without `task` (the playground's sampling or form dialog, through the connection's callbacks), and
serves what the server asks of the task meanwhile: `tasks/get` (its status), `tasks/result` (waits for
the end, then the answer the plain request would have had, or its error), `tasks/cancel` and
`tasks/list`. The tasks live with the connection: they end when it closes.

The SDK 2.3.0 defines these types but neither declares the capability nor answers these requests on
the client side, so `attach` wraps two private methods of its ClientSession (`_build_capabilities`,
`_on_request`) before the session starts. Re-check both on an SDK upgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from mcp import Client, types
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND

# Tasks are the core protocol's at 2025-11-25 only: the 2026 era sends no request to the client.
HANDSHAKE_VERSION = "2025-11-25"
TASKABLE = frozenset({"sampling/createMessage", "elicitation/create"})
CAPABILITY = {
    "list": {},
    "cancel": {},
    "requests": {"sampling": {"createMessage": {}}, "elicitation": {"create": {}}},
}
POLL_MS = 1000  # what the portal suggests: a person answers in seconds, not milliseconds
KEPT = 100  # ended tasks a connection remembers for a late tasks/result, oldest forgotten first
# Each task asks the person: a server may not open more at once than plain requests would show.
MAX_WORKING = 8
TERMINAL = frozenset({"completed", "failed", "cancelled"})

OnRequest = Callable[[Any, str, Mapping[str, Any] | None], Awaitable[dict[str, Any]]]


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class ClientTask:
    id: str
    ttl: int | None
    status: str = "working"
    message: str = ""
    created: str = field(default_factory=_now)
    updated: str = field(default_factory=_now)
    result: dict[str, Any] | None = None
    error: MCPError | None = None
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    work: asyncio.Task[None] | None = None

    def wire(self) -> dict[str, Any]:
        task = {
            "taskId": self.id,
            "status": self.status,
            "createdAt": self.created,
            "lastUpdatedAt": self.updated,
            "ttl": self.ttl,
            "pollInterval": POLL_MS,
        }
        return task | ({"statusMessage": self.message} if self.message else {})

    def end(self, status: str, message: str = "") -> None:
        if self.status in TERMINAL:
            return
        self.status, self.message, self.updated = status, message, _now()
        self.ended.set()


class ClientTasks:
    """The tasks one connection's server asked the portal to run."""

    def __init__(self) -> None:
        self.tasks: OrderedDict[str, ClientTask] = OrderedDict()

    def attach(self, session: Any) -> None:
        """Declare the capability at the handshake and answer task requests (before the session starts)."""
        build_capabilities = session._build_capabilities
        on_request: OnRequest = session._on_request

        def capabilities(version: str) -> types.ClientCapabilities:
            built = build_capabilities(version)
            if version != HANDSHAKE_VERSION:
                return built
            return built.model_copy(update={"tasks": types.ClientTasksCapability.model_validate(CAPABILITY)})

        async def answer(dctx: Any, method: str, params: Mapping[str, Any] | None) -> dict[str, Any]:
            if session.protocol_version == HANDSHAKE_VERSION:
                if method in TASKABLE and isinstance(params, Mapping) and isinstance(params.get("task"), Mapping):
                    return self.start(on_request, dctx, method, params)
                if method.startswith("tasks/"):
                    return await self.serve(method, params or {})
            return await on_request(dctx, method, params)

        session._build_capabilities = capabilities
        session._on_request = answer

    def start(self, on_request: OnRequest, dctx: Any, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        """The task, answered at once; the request itself goes to the person as it would without `task`."""
        if sum(task.status not in TERMINAL for task in self.tasks.values()) >= MAX_WORKING:
            raise MCPError(
                code=INVALID_REQUEST, message=f"The portal runs at most {MAX_WORKING} requests as tasks at once."
            )
        ttl = params["task"].get("ttl")
        task = ClientTask(str(uuid.uuid4()), ttl if isinstance(ttl, int) else None)
        plain = {k: v for k, v in params.items() if k != "task"}

        async def work() -> None:
            try:
                task.result = await on_request(dctx, method, plain)
                task.end("completed")
            except MCPError as exc:
                task.error = exc
                task.end("failed", exc.message)
            except asyncio.CancelledError:
                task.end("cancelled", "The portal stopped the task.")
            except Exception as exc:  # noqa: BLE001 - the server hears the task failed, not nothing
                task.error = MCPError(code=INTERNAL_ERROR, message=f"The portal could not answer: {type(exc).__name__}")
                task.end("failed", task.error.message)

        task.work = asyncio.get_running_loop().create_task(work())
        self.tasks[task.id] = task
        self._forget_old()
        return {"task": task.wire()}

    async def serve(self, method: str, params: Mapping[str, Any]) -> dict[str, Any]:
        if method == "tasks/list":
            return {"tasks": [task.wire() for task in reversed(self.tasks.values())]}
        task = self.tasks.get(str(params.get("taskId")))
        if task is None:
            raise MCPError(code=INVALID_PARAMS, message="Task not found")
        if method == "tasks/get":
            return task.wire()
        if method == "tasks/cancel":
            if task.status in TERMINAL:
                raise MCPError(code=INVALID_PARAMS, message=f"The task already ended ({task.status}).")
            task.end("cancelled", "Cancelled by the server.")
            if task.work is not None:
                task.work.cancel()
            return task.wire()
        if method == "tasks/result":
            await task.ended.wait()
            if task.result is not None:
                related = {"io.modelcontextprotocol/related-task": {"taskId": task.id}}
                return task.result | {"_meta": {**(task.result.get("_meta") or {}), **related}}
            raise task.error or MCPError(code=INVALID_PARAMS, message=f"The task ended {task.status}.")
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=method)

    def _forget_old(self) -> None:
        ended = [task_id for task_id, task in self.tasks.items() if task.status in TERMINAL]
        for task_id in ended[: max(0, len(ended) - KEPT)]:
            del self.tasks[task_id]

    def close(self) -> None:
        """The connection closed: its tasks end with it (the person's open question is moot)."""
        for task in self.tasks.values():
            if task.work is not None and not task.work.done():
                task.work.cancel()


class TaskingClient(Client):
    """The SDK's Client, with `client_tasks` attached to its session before the handshake."""

    def __init__(self, *args: Any, client_tasks: ClientTasks, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._client_tasks = client_tasks

    async def _build_session(self, exit_stack: contextlib.AsyncExitStack) -> Any:
        session = await super()._build_session(exit_stack)
        self._client_tasks.attach(session)
        return session
