"""The MCP package on its own (no Django): the pool against the real demo server, and its diagnoses."""

from __future__ import annotations

import sys

import pytest

from sessions.mcp.config import ConnectionKey, ServerConfig
from sessions.mcp.pool import ConnectionPool, PoolSettings
from sessions.mcp.ssrf import LOCAL_NETWORK
from tests.conftest import free_port
from tests.helpers import probe_failure, stdio_demo


@pytest.fixture
def pool_settings() -> PoolSettings:
    return PoolSettings(idle_seconds=600)  # the pool's defaults: its periodic health check on


def test_it_reuses_the_connection_for_the_same_key(pool):
    config = stdio_demo()
    key = ConnectionKey.for_owner(1, config, "user:1")

    async def twice():
        first = await pool.connection(key, config)
        await pool.call_tool(key, config, "echo", {"message": "a"})
        second = await pool.connection(key, config)
        return first, second

    first, second = pool.run(twice(), timeout=60)
    assert first is second and len(pool) == 1


def test_concurrent_first_calls_open_one_connection(pool):
    import asyncio

    config = stdio_demo()
    key = ConnectionKey.for_owner(1, config, "user:1")

    async def together():
        return await asyncio.gather(*(pool.call_tool(key, config, "echo", {"message": str(i)}) for i in range(5)))

    outcomes = pool.run(together(), timeout=60)
    assert [o.status for o in outcomes] == ["succeeded"] * 5
    assert len(pool) == 1


def test_each_owner_and_each_config_gets_its_own_connection(pool):
    config = stdio_demo()
    edited = stdio_demo(env={"DEMO_FLAG": "1"})
    keys = [
        ConnectionKey.for_owner(1, config, "user:1"),
        ConnectionKey.for_owner(1, config, "user:2"),
        ConnectionKey.for_owner(1, edited, "user:1"),
    ]
    assert len({k for k in keys}) == 3

    async def each():
        return [
            await pool.call_tool(key, cfg, "echo", {"message": "x"})
            for key, cfg in zip(keys, [config, config, edited], strict=True)
        ]

    assert [o.status for o in pool.run(each(), timeout=60)] == ["succeeded"] * 3
    assert len(pool) == 3


def test_tool_lists_are_cached_per_connection_until_refreshed(pool):
    config = stdio_demo()
    key = ConnectionKey.for_owner(1, config, "user:1")

    async def lists():
        first = await pool.list_tools(key, config)
        cached = await pool.list_tools(key, config)
        fresh = await pool.list_tools(key, config, refresh=True)
        return first, cached, fresh

    first, cached, fresh = pool.run(lists(), timeout=60)
    assert first is cached and fresh is not first and fresh == first


def test_idle_connections_are_closed(pool):
    pool.settings.idle_seconds = 0
    config = stdio_demo()
    key = ConnectionKey.for_owner(1, config, "user:1")
    pool.run(pool.call_tool(key, config, "echo", {"message": "x"}), timeout=60)
    assert pool.run(pool.reap_idle(), timeout=30) == 1
    assert len(pool) == 0


def test_the_least_recently_used_idle_connection_makes_room_over_the_cap(pool):
    pool.settings.max_connections = 2
    config = stdio_demo()
    keys = [ConnectionKey.for_owner(1, config, f"user:{n}") for n in (1, 2, 3)]

    async def scenario():
        for key in keys[:2]:
            await pool.call_tool(key, config, "echo", {"message": "x"})
        await pool.call_tool(keys[0], config, "echo", {"message": "touch the first again"})
        await pool.call_tool(keys[2], config, "echo", {"message": "x"})
        return list(pool._connections)

    assert pool.run(scenario(), timeout=60) == [keys[0], keys[2]]


def test_the_probe_reports_the_handshake(pool):
    info = pool.run(pool.probe(stdio_demo()), timeout=60)
    assert info["server_name"] == "portal-demo" and info["server_version"] == "1.0.0"
    assert info["tool_count"] == len(info["tools"]) >= 6
    assert info["instructions"].startswith("A demo server")
    assert info["handshake_ms"] > 0 and info["round_trip_ms"] > 0


def test_it_works_over_streamable_http(pool, demo_http_url):
    config = ServerConfig(
        network=LOCAL_NETWORK, name="demo-http", transport="http", url=demo_http_url, headers={"X-Portal-Test": "1"}
    )
    key = ConnectionKey.for_owner(2, config, "user:1")
    outcome = pool.run(pool.call_tool(key, config, "add", {"a": 1, "b": 2}), timeout=60)
    assert outcome.status == "succeeded" and outcome.result["structuredContent"] == {"sum": 3.0}


def test_diagnosis_command_not_found(pool):
    failure = probe_failure(
        pool, ServerConfig(network=LOCAL_NETWORK, name="x", transport="stdio", command="/nonexistent/mcp-server")
    )
    assert failure.kind == "command_not_found" and "/nonexistent/mcp-server" in failure.message


def test_diagnosis_process_exited_with_its_stderr(pool):
    config = ServerConfig(
        network=LOCAL_NETWORK,
        name="x",
        transport="stdio",
        command=sys.executable,
        args=("-c", "import sys; sys.stderr.write('fatal: missing API_KEY\\n'); sys.exit(2)"),
    )
    failure = probe_failure(pool, config)
    assert failure.kind == "process_exited"
    assert "fatal: missing API_KEY" in failure.message and "fatal: missing API_KEY" in failure.stderr_tail


def test_diagnosis_connection_refused(pool):
    failure = probe_failure(
        pool, ServerConfig(network=LOCAL_NETWORK, name="x", transport="http", url=f"http://127.0.0.1:{free_port()}/mcp")
    )
    assert failure.kind == "connection_refused"


def test_diagnosis_http_status(pool, demo_http_url):
    wrong_path = demo_http_url.replace("/mcp", "/not-mcp")
    failure = probe_failure(pool, ServerConfig(network=LOCAL_NETWORK, name="x", transport="http", url=wrong_path))
    assert failure.kind == "http_status" and failure.status_code == 404
    assert "HTTP 404" in failure.message and "wrong path" in failure.message


def test_diagnosis_handshake_timeout(pool):
    silent = ServerConfig(
        network=LOCAL_NETWORK,
        name="x",
        transport="stdio",
        command=sys.executable,
        args=("-c", "import time; time.sleep(60)"),
        connect_timeout=1,
    )
    failure = probe_failure(pool, silent)
    assert failure.kind == "timeout" and "no handshake within 1 s" in failure.message


def test_callers_waiting_on_an_opening_that_times_out_all_get_the_diagnosis(pool):
    import asyncio

    silent = ServerConfig(
        network=LOCAL_NETWORK,
        name="x",
        transport="stdio",
        command=sys.executable,
        args=("-c", "import time; time.sleep(60)"),
        connect_timeout=1,
    )
    key = ConnectionKey.for_owner(1, silent, "user:1")

    async def together():
        return await asyncio.gather(*(pool.call_tool(key, silent, "echo", {"message": "x"}) for _ in range(3)))

    outcomes = pool.run(together(), timeout=60)
    assert [(o.status, o.failure.kind) for o in outcomes] == [("timed_out", "timeout")] * 3
    assert all("no handshake within 1 s" in o.failure.message for o in outcomes)


def test_a_request_timeout_keeps_the_connection_usable(pool):
    config = stdio_demo(request_timeout=0.5)
    key = ConnectionKey.for_owner(1, config, "user:1")
    slow = pool.run(pool.call_tool(key, config, "sleep", {"seconds": 5}), timeout=60)
    after = pool.run(pool.call_tool(key, config, "echo", {"message": "ok"}), timeout=60)
    assert slow.status == "timed_out" and "within 0.5 s" in slow.failure.message
    assert after.status == "succeeded"


@pytest.mark.parametrize(
    "owner, protocol, one_at_a_time",
    [("team:1", "legacy", True), ("user:1", "legacy", False), ("team:1", "modern", False)],
)
def test_only_a_shared_handshake_era_connection_serves_one_call_at_a_time(pool, owner, protocol, one_at_a_time):
    """Its server requests cannot be told apart (docs/connections.md); every other connection stays concurrent."""
    import asyncio
    import time

    config = stdio_demo(protocol=protocol)
    key = ConnectionKey.for_owner(1, config, owner)

    async def two_sleeps() -> tuple[float, list[str]]:
        await pool.connection(key, config)
        started = time.monotonic()
        outcomes = await asyncio.gather(*(pool.call_tool(key, config, "sleep", {"seconds": 1}) for _ in range(2)))
        return time.monotonic() - started, [o.status for o in outcomes]

    took, statuses = pool.run(two_sleeps(), timeout=60)
    assert statuses == ["succeeded", "succeeded"]
    assert (took >= 2.0) is one_at_a_time, took


def test_shutdown_leaves_no_stdio_process_behind():
    import os
    import time

    before = set(_children(os.getpid()))  # other tests' servers, e.g. the HTTP demo fixture
    pool = ConnectionPool()
    config = stdio_demo()
    key = ConnectionKey.for_owner(1, config, "user:1")
    pool.run(pool.call_tool(key, config, "echo", {"message": "x"}), timeout=60)
    children = [pid for pid in _children(os.getpid()) if pid not in before]
    assert children, "the stdio server should run as our child"
    pool.shutdown()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(pid) for pid in children):
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in children)


def _children(pid: int) -> list[int]:
    from pathlib import Path

    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        fields = dict(line.split(":\t", 1) for line in text.splitlines() if ":\t" in line)
        if fields.get("PPid", "").strip() == str(pid) and "demo_server" in (
            status.parent / "cmdline"
        ).read_bytes().decode(errors="replace"):
            found.append(int(status.parent.name))
    return found


def _alive(pid: int) -> bool:
    from pathlib import Path

    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state


def test_the_client_declares_it_renders_apps_and_follows_tasks(pool):
    """The portal's client says what it can do on every 2026 request: render MCP Apps (the
    playground's sandboxed frame, so a server may offer the tools that carry one) and follow tasks."""
    config = stdio_demo()
    outcome = pool.run(pool.call_tool(ConnectionKey.for_owner(1, config, "user:1"), config, "echo", {"message": "a"}))
    sent = outcome.exchange[0]["message"]
    assert sent["method"] == "tools/call"
    declared = sent["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"]
    assert declared["io.modelcontextprotocol/ui"] == {"mimeTypes": ["text/html;profile=mcp-app"]}
    assert "io.modelcontextprotocol/tasks" in declared
