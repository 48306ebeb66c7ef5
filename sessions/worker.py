"""What a worker process does with the MCP pool: the Django side of running calls.

Celery tasks (tasks.py) are one line each and land here. This module loads rows,
builds a plain `ServerConfig`, runs the MCP package's coroutines on the process's
pool loop, records outcomes through actions, and publishes events to the user's
channel-layer group, from the pool loop so they stay in order.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import socket
import threading
import time
from typing import Any

from channels.layers import get_channel_layer
from django.conf import settings
from django.core.cache import cache

from servers import actions as server_actions
from servers.models import Server

from . import actions, credentials
from .mcp.config import ConnectionKey, ServerConfig
from .mcp.errors import ConnectionFailed, Failure
from .mcp.pool import CallOutcome, ConnectionPool, PoolSettings
from .mcp.schema import validate_arguments
from .models import CallStatus, ToolCall

log = logging.getLogger(__name__)

_pool: ConnectionPool | None = None
_pool_lock = threading.Lock()
WORKER_NAME = f"{socket.gethostname()}:{os.getpid()}"
HEARTBEAT_KEY = "portal:worker-heartbeat"


def get_pool() -> ConnectionPool:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ConnectionPool(
                PoolSettings(
                    max_connections=settings.MCP_POOL_MAX_CONNECTIONS,
                    idle_seconds=settings.MCP_POOL_IDLE_SECONDS,
                    local_batch=settings.MCP_SERVER_CONNECTION_BATCH_SIZE,
                    remote_batch=settings.MCP_REMOTE_SERVER_CONNECTION_BATCH_SIZE,
                )
            )
        return _pool


def shutdown_pool() -> None:
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown()


def user_group(user_id: int) -> str:
    return f"user.{user_id}"


def connection_key(server: Server, config: ServerConfig, user_id: int) -> ConnectionKey:
    # One session per (server, user): a stdio process holding one user's state never serves another.
    return ConnectionKey.for_owner(server.pk, config, f"user:{user_id}")


async def _publish(user_id: int, event: dict[str, Any]) -> None:
    await get_channel_layer().group_send(user_group(user_id), {"type": "portal.event", "event": event})


def publish(user_id: int, event: dict[str, Any]) -> None:
    get_pool().run(_publish(user_id, event), timeout=10)


# -- tool calls ------------------------------------------------------------------------


def execute_tool_call(call_id: str) -> None:
    """Run one recorded call to its end. Whatever happens, the record ends with a status."""
    if not actions.do_claim_tool_call(call_id, WORKER_NAME):
        return
    call = ToolCall.objects.select_related("server").get(pk=call_id)
    try:
        outcome = _run_call(call)
        finished = actions.do_finish_tool_call(
            call_id,
            outcome.status,
            result=outcome.result,
            error=outcome.failure.message if outcome.failure else "",
            error_kind=outcome.failure.kind if outcome.failure else "",
            details=_details(outcome),
            duration_ms=outcome.duration_ms,
        )
    except Exception as exc:  # noqa: BLE001 - the record must end, whatever broke
        log.exception("tool call %s failed inside the worker", call_id)
        finished = actions.do_finish_tool_call(
            call_id, CallStatus.FAILED, error=f"The worker failed: {type(exc).__name__}: {exc}", error_kind="internal"
        )
    publish(call.user_id, {"type": "call.ended", **finished.as_event()})


def _details(outcome: CallOutcome) -> dict[str, Any]:
    details: dict[str, Any] = {}
    if outcome.failure is not None:
        if outcome.failure.stderr_tail:
            details["stderr_tail"] = outcome.failure.stderr_tail
        if outcome.failure.status_code is not None:
            details["status_code"] = outcome.failure.status_code
    if outcome.errors:
        details["errors"] = outcome.errors
    return details


def _run_call(call: ToolCall) -> CallOutcome:
    server = call.server
    if server is None or not server.enabled:
        reason = "The server was deleted." if server is None else f"{server.name} is disabled."
        return CallOutcome(CallStatus.REJECTED, failure=Failure("server_unavailable", reason))
    prepared = credentials.prepare(server, call.user_id)
    if prepared.failure is not None:
        return credentials.settle(
            server, call.user_id, prepared, CallOutcome(CallStatus.FAILED, failure=prepared.failure)
        )
    config, key = prepared.config, prepared.key
    pool = get_pool()
    call_id, user_id = str(call.id), call.user_id

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        await _publish(
            user_id,
            {"type": "call.progress", "call": call_id, "progress": progress, "total": total, "message": message},
        )

    async def run() -> CallOutcome:
        await _publish(user_id, {"type": "call.started", "call": call_id, "worker": WORKER_NAME})
        try:
            tools = await pool.list_tools(key, config)
        except ConnectionFailed as exc:
            return CallOutcome(CallStatus.FAILED, failure=exc.failure)
        tool = next((t for t in tools if t.get("name") == call.tool), None)
        if tool is None:
            return CallOutcome(
                CallStatus.REJECTED, failure=Failure("unknown_tool", f"{server.name} has no tool named {call.tool!r}.")
            )
        errors = validate_arguments(tool.get("inputSchema"), call.arguments)
        if errors:
            failure = Failure("invalid_arguments", "The arguments do not match the tool's schema.")
            return CallOutcome(CallStatus.REJECTED, failure=failure, errors=errors)
        return await pool.call_tool(key, config, call.tool, call.arguments, on_progress=on_progress)

    backstop = config.connect_timeout + config.request_timeout + 30
    try:
        outcome = pool.run(run(), timeout=backstop)
    except concurrent.futures.TimeoutError:
        outcome = CallOutcome(
            CallStatus.TIMED_OUT, failure=Failure("timeout", f"the worker gave up after {backstop:g} s")
        )
    return credentials.settle(server, call.user_id, prepared, outcome)


# -- listing and testing -----------------------------------------------------------------


def execute_list_tools(server_id: int, user_id: int, refresh: bool) -> None:
    server = Server.objects.filter(pk=server_id).first()
    if server is None:
        publish(
            user_id,
            {"type": "tools", "server": server_id, "error": {"kind": "unknown_server", "message": "Unknown server."}},
        )
        return
    prepared = credentials.prepare(server, user_id)
    config = prepared.config
    pool = get_pool()
    try:
        if prepared.failure is not None:
            raise ConnectionFailed(prepared.failure)
        tools = pool.run(
            pool.list_tools(prepared.key, config, refresh),
            timeout=config.connect_timeout + config.request_timeout + 30,
        )
    except ConnectionFailed as exc:
        failure = credentials.settle_failure(server, user_id, prepared, exc.failure)
        publish(user_id, {"type": "tools", "server": server_id, "error": failure.as_dict()})
        return
    server_actions.do_record_tools(server_id, tools)
    publish(user_id, {"type": "tools", "server": server_id, "tools": tools})


def execute_test_connection(server_id: int, user_id: int) -> None:
    server = Server.objects.filter(pk=server_id).first()
    if server is None:
        return
    # The admin tests with their own credentials, as any user would connect.
    prepared = credentials.prepare(server, user_id)
    config = prepared.config
    pool = get_pool()
    try:
        if prepared.failure is not None:
            raise ConnectionFailed(prepared.failure)
        info = pool.run(pool.probe(config), timeout=config.connect_timeout + config.request_timeout + 30)
    except ConnectionFailed as exc:
        failure = credentials.settle_failure(server, user_id, prepared, exc.failure)
        result: dict[str, Any] = {"ok": False, **failure.as_dict()}
    else:
        server_actions.do_record_tools(server_id, info.pop("tools"))
        result = {"ok": True, **info}
    server_actions.do_record_test(server_id, result)
    publish(user_id, {"type": "connection.tested", "server": server_id, **result})


# -- liveness ----------------------------------------------------------------------------


def start_heartbeat(name: str = WORKER_NAME) -> threading.Thread:
    """Tell /healthz this worker is alive, every few seconds, from a thread of its own."""
    interval = settings.PORTAL_WORKER_HEARTBEAT_SECONDS

    def beat() -> None:
        while True:
            try:
                now = time.time()
                cache.set(HEARTBEAT_KEY, {"worker": name, "at": now}, timeout=int(interval * 3) + 1)
            except Exception:  # noqa: BLE001 - a cache outage must not kill the worker
                log.warning("worker heartbeat failed", exc_info=True)
            time.sleep(interval)

    thread = threading.Thread(target=beat, name="portal-heartbeat", daemon=True)
    thread.start()
    return thread


def last_heartbeat() -> dict[str, Any] | None:
    return cache.get(HEARTBEAT_KEY)
