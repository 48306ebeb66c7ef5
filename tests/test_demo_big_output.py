"""The demo server's `big` tool (large results for bench/) and the pool's record of connection opens."""

from __future__ import annotations

import logging

import pytest

from sessions.mcp.config import ConnectionKey
from sessions.mcp.demo_server import MAX_BIG_BYTES
from sessions.mcp.pool import PoolSettings
from tests.helpers import stdio_demo

CONFIG = stdio_demo()
KEY = ConnectionKey.for_owner(1, CONFIG, "user:1")


@pytest.fixture
def pool_settings() -> PoolSettings:
    return PoolSettings(idle_seconds=600)  # the pool's defaults: its periodic health check on


def test_big_returns_exactly_the_bytes_asked_for(pool):
    outcome = pool.run(pool.call_tool(KEY, CONFIG, "big", {"size_bytes": 100_000}), timeout=60)
    assert outcome.status == "succeeded"
    assert len(outcome.result["content"][0]["text"]) == 100_000


def test_big_refuses_more_than_its_cap(pool):
    outcome = pool.run(pool.call_tool(KEY, CONFIG, "big", {"size_bytes": MAX_BIG_BYTES + 1}), timeout=60)
    assert outcome.status == "tool_error"
    assert "less than or equal" in outcome.result["content"][0]["text"]


def test_the_pool_logs_one_open_per_connection_and_none_for_warm_calls(pool, caplog):
    caplog.set_level(logging.INFO, logger="sessions.mcp.pool")

    async def three_calls():
        for message in ("a", "b", "c"):
            await pool.call_tool(KEY, CONFIG, "echo", {"message": message})

    pool.run(three_calls(), timeout=60)
    opens = [r.getMessage() for r in caplog.records if "MCP connection opened" in r.getMessage()]
    assert len(opens) == 1
    assert opens[0].startswith("MCP connection opened: demo (stdio) for user:1 in ")
