"""Recovery: an expired session, terminal errors, health checks, request deadlines and progress."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import replace

import anyio
import pytest

from sessions.mcp.config import ConnectionKey, ServerConfig
from sessions.mcp.errors import is_session_expired, is_terminal
from sessions.mcp.failure import ConnectionFailed
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


# Every request on a pooled connection, not only a tool call: (what it asks, how to see the answer).
REQUESTS_AFTER_A_RESTART = {
    "resource read": (
        lambda pool, key, config: pool.read_resource(key, config, "demo://greeting/Grace"),
        lambda answer: answer["contents"][0]["text"] == "Hello, Grace!",
    ),
    "prompt": (
        lambda pool, key, config: pool.get_prompt(key, config, "hello", {}),
        lambda answer: bool(answer["messages"]),
    ),
    "completion": (
        lambda pool, key, config: pool.complete(key, config, {"template": "demo://greeting/{name}"}, "name", "al"),
        lambda answer: answer["values"] == ["Alan", "Alonzo"],
    ),
    "resource list": (
        lambda pool, key, config: pool.list_resources(key, config),
        lambda answer: answer["offered"] and any(r["uri"] == "demo://readme" for r in answer["resources"]),
    ),
}


@pytest.mark.parametrize("request_name", list(REQUESTS_AFTER_A_RESTART))
def test_an_expired_session_costs_any_request_one_retry_on_a_new_connection(
    pool, restartable_http_server, request_name
):
    ask, answered = REQUESTS_AFTER_A_RESTART[request_name]
    url = f"http://127.0.0.1:{restartable_http_server.port}/mcp"
    config = ServerConfig(network=LOCAL_NETWORK, name="demo", transport="http", url=url, protocol="legacy")
    key = ConnectionKey.for_owner(1, config, "user:1")
    assert answered(pool.run(ask(pool, key, config), timeout=60))
    old = pool.run(pool.connection(key, config), timeout=30)
    restartable_http_server.restart()  # the new process knows nothing of the old session

    assert answered(pool.run(ask(pool, key, config), timeout=60))
    new = pool.run(pool.connection(key, config), timeout=30)
    # The dead connection was replaced, not kept: the old one is closed and the pool holds the new one.
    assert new is not old and old.closed and not new.closed
    assert pool.keys() == [key] and not new.http.session_expired


def test_requests_side_by_side_on_an_expired_session_share_one_new_connection(pool, restartable_http_server):
    # A page asks for its resources and prompts at once: each finds the session gone, and none may
    # drop the connection another has just opened in its place.
    url = f"http://127.0.0.1:{restartable_http_server.port}/mcp"
    config = ServerConfig(network=LOCAL_NETWORK, name="demo", transport="http", url=url, protocol="legacy")
    key = ConnectionKey.for_owner(1, config, "user:1")
    old = pool.run(pool.connection(key, config), timeout=60)
    restartable_http_server.restart()

    async def side_by_side():
        answers = await asyncio.gather(*(ask(pool, key, config) for ask, _ in REQUESTS_AFTER_A_RESTART.values()))
        return answers, await pool.connection(key, config)

    answers, new = pool.run(side_by_side(), timeout=60)
    assert all(answered(a) for (_, answered), a in zip(REQUESTS_AFTER_A_RESTART.values(), answers, strict=True))
    assert new is not old and old.closed and not new.closed and pool.keys() == [key]


def test_leaving_a_subscription_of_an_expired_session_drops_the_connection_and_opens_none(
    pool, restartable_http_server
):
    url = f"http://127.0.0.1:{restartable_http_server.port}/mcp"
    config = ServerConfig(network=LOCAL_NETWORK, name="demo", transport="http", url=url, protocol="legacy")
    key = ConnectionKey.for_owner(1, config, "user:1")

    async def ignore(uri: str, event: str, message: str) -> None:
        pass

    pool.run(pool.subscribe_resource(key, config, "demo://counter", ignore, "tab-1"), timeout=60)
    old = pool.run(pool.connection(key, config), timeout=30)
    restartable_http_server.restart()

    with pytest.raises(ConnectionFailed):
        pool.run(pool.unsubscribe_resource(key, config, "demo://counter", "tab-1"), timeout=60)
    # The server forgot the session and its subscriptions: nothing to retry, and nothing left pooled.
    assert old.closed and len(pool) == 0


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
