"""stdio servers as process groups: the graceful stop escalation and reaping (docs/connections.md).

The SDK's own stdio shutdown waits 2 s after closing stdin, then 2 s after SIGTERM. Claude Code's
MCP client gives a server about 600 ms in all: close stdin, then SIGINT, SIGTERM and SIGKILL to the
whole process group, each after a short wait. Killed grandchildren are orphans whose new parent
must reap them; PID 1 in a container often does not, so the pool makes its process a child
subreaper and reaps the group's orphans itself.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio

log = logging.getLogger(__name__)

PR_SET_CHILD_SUBREAPER = 36
POLL_SECONDS = 0.01


@dataclass(frozen=True)
class StopSchedule:
    """How long each step waits for the group to go before the next, harsher one."""

    after_stdin_close: float = 0.1
    after_sigint: float = 0.1
    after_sigterm: float = 0.4


STOP_SCHEDULE = StopSchedule()


def become_subreaper() -> bool:
    """Make orphaned descendants of this process its own children (Linux), so they can be reaped."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of a process, from /proc; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: split after the last ')'.
    fields = text[text.rfind(")") + 2 :].split()
    return fields[0], int(fields[1]), int(fields[2])


def group_members(pgid: int) -> list[tuple[int, str, int]]:
    """(pid, state, ppid) of every process in the group, zombies included (Linux /proc)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if stat is not None and stat[2] == pgid:
            members.append((int(entry.name), stat[0], stat[1]))
    return members


def group_alive(pgid: int, leader_exited: bool) -> bool:
    """Whether any member of the group is still running (zombies do not count)."""
    if os.path.isdir("/proc/self"):
        return any(state != "Z" for _pid, state, _ppid in group_members(pgid))
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not leader_exited


def reap_orphans(pgid: int, leader: int) -> int:
    """Reap the group's zombies that became our children; the leader is left to asyncio's watcher."""
    reaped = 0
    me = os.getpid()
    for pid, state, ppid in group_members(pgid) if os.path.isdir("/proc/self") else []:
        if pid != leader and ppid == me and state == "Z":
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
                reaped += 1
    return reaped


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


async def _wait_gone(process: anyio.abc.Process, pgid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while True:
        if not group_alive(pgid, process.returncode is not None):
            return True
        if time.monotonic() >= deadline:
            return False
        await anyio.sleep(POLL_SECONDS)


async def stop_process_group(process: anyio.abc.Process, schedule: StopSchedule = STOP_SCHEDULE) -> str:
    """Close stdin, then SIGINT → SIGTERM → SIGKILL the whole group; returns the step that ended it."""
    pgid = process.pid  # the leader of a new session: its pid is the group id
    if process.stdin is not None:
        with contextlib.suppress(OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            await process.stdin.aclose()
    ended = "stdin"
    if not await _wait_gone(process, pgid, schedule.after_stdin_close):
        ended = "SIGINT"
        _signal_group(pgid, signal.SIGINT)
        if not await _wait_gone(process, pgid, schedule.after_sigint):
            ended = "SIGTERM"
            _signal_group(pgid, signal.SIGTERM)
            if not await _wait_gone(process, pgid, schedule.after_sigterm):
                ended = "SIGKILL"
                _signal_group(pgid, signal.SIGKILL)
                with anyio.move_on_after(2.0):
                    while group_alive(pgid, process.returncode is not None):
                        await anyio.sleep(POLL_SECONDS)
    # Let asyncio's child watcher collect the leader, then collect the orphans ourselves.
    with anyio.move_on_after(1.0):
        while process.returncode is None:
            await anyio.sleep(POLL_SECONDS)
    reap_orphans(pgid, process.pid)
    log.debug("stdio server group %d stopped at %s", pgid, ended)
    return ended
