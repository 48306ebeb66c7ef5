"""stdio servers stop as Claude Code's MCP client stops them: stdin, SIGINT, SIGTERM, SIGKILL, the whole group, no zombie."""

from __future__ import annotations

import sys

import anyio
import pytest

from sessions.mcp.config import ConnectionKey
from sessions.mcp.pool import ConnectionPool, PoolSettings
from sessions.mcp.processes import StopSchedule, become_subreaper, group_members, stop_process_group
from tests.helpers import stdio_demo


def leftovers(pgid: int) -> list[tuple[int, str, int]]:
    """Every process of the group still in /proc: running ones (orphans) and zombies alike."""
    return group_members(pgid)


@pytest.mark.parametrize("stubborn", [False, True])
def test_closing_a_connection_leaves_no_process_of_its_group(stubborn):
    pool = ConnectionPool(PoolSettings(health_seconds=0))
    config = stdio_demo()
    key = ConnectionKey.for_owner(1, config, "user:1")
    try:
        outcome = pool.run(pool.call_tool(key, config, "spawn", {"stubborn": stubborn}), timeout=60)
        spawned = outcome.result["structuredContent"]
        group = spawned["server_pid"]
        assert {pid for pid, _state, _ppid in leftovers(group)} == {group, spawned["pid"]}
        pool.run(pool.drop(key), timeout=30)
        assert leftovers(group) == []
    finally:
        pool.shutdown()


def test_stopping_the_worker_pool_leaves_no_process_behind():
    pool = ConnectionPool(PoolSettings(health_seconds=0))
    groups = []
    for owner in ("user:1", "user:2", "team:1"):
        config = stdio_demo()
        key = ConnectionKey.for_owner(1, config, owner)
        outcome = pool.run(pool.call_tool(key, config, "spawn", {"stubborn": owner == "team:1"}), timeout=60)
        groups.append(outcome.result["structuredContent"]["server_pid"])
    pool.shutdown()
    assert [leftovers(group) for group in groups] == [[], [], []]


def test_the_escalation_goes_only_as_far_as_it_must():
    become_subreaper()
    ready = "import signal, sys, time; "
    quits_on_eof = ready + "print('ready', flush=True); sys.stdin.read()"
    ignores_eof = ready + "print('ready', flush=True); time.sleep(60)"
    ignores_sigint = ready + "signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    ignores_everything_but_kill = (
        ready + "[signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]; "
        "print('ready', flush=True); time.sleep(60)"
    )

    # Which step ends each process is what this checks, not the ~600 ms schedule: each step waits
    # up to 2 s (a process that obeys goes at once), so a loaded machine's slow exit is not taken
    # for a refusal.
    patient = StopSchedule(after_stdin_close=2.0, after_sigint=2.0, after_sigterm=2.0)

    async def stop(code: str) -> tuple[str, int]:
        process = await anyio.open_process([sys.executable, "-c", code], start_new_session=True)
        assert process.stdout is not None
        await process.stdout.receive()  # its signal handlers are in place
        return await stop_process_group(process, patient), process.pid

    steps = []
    for command in (quits_on_eof, ignores_eof, ignores_sigint, ignores_everything_but_kill):
        step, pid = anyio.run(stop, command)
        steps.append(step)
        assert leftovers(pid) == []
    assert steps == ["stdin", "SIGINT", "SIGTERM", "SIGKILL"]
