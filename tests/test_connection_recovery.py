"""Recovery: an expired session, terminal errors, health checks, request deadlines and progress."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import replace

import anyio

from sessions.mcp.config import ConnectionKey, ServerConfig
from sessions.mcp.errors import is_session_expired, is_terminal
from sessions.mcp.pool import Connection
from sessions.mcp.ssrf import LOCAL_NETWORK
from tests.helpers import stdio_demo


def test_a_server_restarted_under_a_live_session_costs_one_retry(pool, restartable_http_server):
    # The handshake era has sessions (Mcp-Session-Id); 2026-07-28 over HTTP is stateless.
    url = f"http://127.0.0.1:{restartable_http_server.port}/mcp"
    config = ServerConfig(network=LOCAL_NETWORK, name="demo", transport="http", url=url, protocol="legacy")
    key = ConnectionKey.for_owner(1, config, "user:1")
    first = pool.run(pool.call_tool(key, config, "echo", {"message": "before"}), timeout=60)
    listed = pool.run(pool.list_tools(key, config), timeout=30)
    old = pool.run(pool.connection(key, config), timeout=30)
    assert listed and old.tools is listed  # the tool list is cached on the connection
    restartable_http_server.restart()

    after = pool.run(pool.call_tool(key, config, "echo", {"message": "after"}), timeout=60)
    new = pool.run(pool.connection(key, config), timeout=30)
    assert first.status == "succeeded" and not first.retried
    assert after.status == "succeeded" and after.retried
    assert after.result["content"][0]["text"] == "after"
    # Dropped and reconnected: the old connection is closed, and the new one starts without its cache.
    assert new is not old and old.closed and not new.closed
    assert new.tools is None


def test_session_expiry_is_told_apart_from_a_timeout_and_a_wrong_path():
    from mcp.shared.exceptions import MCPError
    from mcp.types import ErrorData

    def error(code: int, message: str) -> MCPError:
        return MCPError.from_error_data(ErrorData(code=code, message=message))

    assert is_session_expired(error(-32001, "Session not found"))
    assert is_session_expired(error(-32600, "Session terminated"))
    assert is_session_expired(error(-32600, "Bad Request"), http_404_with_session=True)
    assert not is_session_expired(error(-32001, "Request 'tools/call' timed out"))
    assert not is_session_expired(error(-32601, "Not Found"))
    assert not is_session_expired(ValueError("Session not found"))


def test_three_terminal_errors_in_a_row_close_the_connection_and_others_reset_the_count():
    from mcp.shared.exceptions import MCPError
    from mcp.types import ErrorData

    conn = Connection(key=None, config=stdio_demo())
    refused, reset = ConnectionRefusedError(111, "refused"), ConnectionResetError(104, "reset")
    server_error = MCPError.from_error_data(ErrorData(code=-32603, message="boom"))
    assert is_terminal(refused) and is_terminal(reset) and is_terminal(anyio.EndOfStream())
    assert not is_terminal(server_error)

    assert conn.record(refused) is False and conn.record(reset) is False
    assert conn.record(server_error) is False and conn.terminal_errors == 0
    assert [conn.record(refused) for _ in range(3)] == [False, False, True]
    assert conn._stop.is_set()


def test_health_checks_close_a_server_that_stopped_answering(pool):
    # A live server's ping must fit the deadline on a loaded machine too; a stopped one never answers,
    # so the deadline only sets how long the three failing checks take (3 x 3 s).
    config = stdio_demo(request_timeout=3.0)
    key = ConnectionKey.for_owner(1, config, "user:1")
    outcome = pool.run(pool.call_tool(key, config, "spawn", {}), timeout=60)
    server_pid = outcome.result["structuredContent"]["server_pid"]
    assert pool.run(pool.check_health(), timeout=30) == {key: "connected"}

    os.kill(server_pid, signal.SIGSTOP)  # alive, but silent
    try:
        results = [pool.run(pool.check_health(), timeout=30).get(key) for _ in range(3)]
    finally:
        with contextlib.suppress(ProcessLookupError):  # closing it has killed it, as it should
            os.kill(server_pid, signal.SIGCONT)
    assert results == ["unhealthy", "unhealthy", "failed"]
    assert len(pool) == 0


def test_health_checks_use_a_cheap_request_in_2026(pool):
    config = stdio_demo()
    key = ConnectionKey.for_owner(1, config, "user:1")
    pool.run(pool.call_tool(key, config, "echo", {"message": "x"}), timeout=60)
    conn = pool.run(pool.connection(key, config), timeout=30)
    assert conn.negotiated.era == "modern"  # where ping no longer exists
    assert pool.run(pool.check_health(), timeout=30) == {key: "connected"}


def test_a_request_timeout_cuts_a_long_call_unless_progress_restarts_it(pool):
    config = stdio_demo(request_timeout=2.0)
    slow_but_talking = {"steps": 5, "delay": 0.5}  # 2.5 s in all, progress every 0.5 s
    plain = ConnectionKey.for_owner(1, config, "user:1")
    cut = pool.run(pool.call_tool(plain, config, "count", slow_but_talking), timeout=60)

    patient = replace(config, reset_timeout_on_progress=True)
    key = ConnectionKey.for_owner(1, patient, "user:1")
    kept = pool.run(pool.call_tool(key, patient, "count", slow_but_talking), timeout=60)
    silent = pool.run(pool.call_tool(key, patient, "sleep", {"seconds": 5}), timeout=60)

    assert cut.status == "timed_out" and "within 2 s" in cut.failure.message
    assert kept.status == "succeeded" and kept.result["content"][0]["text"] == "counted to 5"
    assert silent.status == "timed_out"
    after = pool.run(pool.call_tool(key, patient, "echo", {"message": "still usable"}), timeout=60)
    assert after.status == "succeeded"
