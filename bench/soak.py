"""`make soak`: mixed load on the distributed portal while faults are injected; nothing may be lost.

    python -m bench.soak [--minutes 10] [--users 8] [--fault-every 20] [--every-fault-once]
                         [--out bench/results/soak-latest.json]

The portal (daphne and two Celery workers) runs on a PostgreSQL and a Redis of the soak's own
(bench/services.py), so restarting them disturbs nothing else on the machine. Each user holds a
playground WebSocket and calls, one at a time, a mix of tools: echo over stdio and Streamable HTTP,
`count` with progress, and the misbehaving server's `flood`, `huge`, `garbage` and `garbage_only`
(tests/servers/fault_server.py). Every `--fault-every` seconds one fault is injected, in turn:
a worker killed (SIGKILL) and started again, Redis restarted, PostgreSQL restarted, the HTTP MCP
server killed and started again, the stdio MCP servers killed, and a user's socket dropped mid-call.

At the end the load stops, the soak waits for the portal to end what was in flight (the workers'
sweep ends the calls of a killed worker and sends lost ones again), then reads the database:
records lost = calls the clients saw accepted that have no row, rows that never ended, and ended
rows without exactly one audit row for their end. It must be 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench import services
from bench.client import Playground, login, lost_records
from bench.stack import ROOT, DemoHttpServer, Portal, children, start_portal

# (weight, server, tool, arguments): what a user calls next.
MIX: list[tuple[int, str, str, dict[str, Any]]] = [
    (35, "stdio", "echo", {"message": "soak"}),
    (30, "http", "echo", {"message": "soak"}),
    (10, "stdio", "count", {"steps": 5, "delay": 0.05}),
    (6, "fault", "garbage", {}),
    (6, "fault", "flood", {"count": 500}),
    (3, "fault", "huge", {"megabytes": 5}),
    (3, "fault", "garbage_only", {}),  # no answer: ends timed out at the server's 5 s deadline
]
FAULTS = ("kill_worker", "restart_redis", "restart_postgres", "kill_http_server", "kill_stdio_servers", "drop_socket")
CALL_WAIT = 90.0  # how long a user waits for call.ended before it stops watching that call
SETTLE_SECONDS = 180.0


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.deadline = 0.0
        self.accepted: set[str] = set()
        self.ended: Counter[str] = Counter()  # call.ended seen by a client, by status
        self.client_errors: Counter[str] = Counter()  # what a client saw go wrong, by kind
        self.faults: Counter[str] = Counter()
        self.turns = 0  # faults tried, in turn
        self.last_fault = "none yet"
        self.after_fault: Counter[str] = Counter()  # client-side errors, by the fault injected last
        self.drop_next = asyncio.Event()

    # -- setup -----------------------------------------------------------------------------

    def start(self) -> None:
        self.redis = services.PrivateRedis().start()
        self.postgres = services.PrivatePostgres().start()
        self.database_url = self.postgres.create_database("portal_soak")
        self.http = DemoHttpServer()
        self.portal: Portal = start_portal(
            "distributed",
            users=self.args.users,
            http_url=self.http.url,
            stores=(self.database_url, self.redis.url),
            extra_env={
                "PORTAL_WORKER_HEARTBEAT_SECONDS": "1",
                "PORTAL_PENDING_RESEND_SECONDS": "20",
                "MCP_HEALTH_CHECK_SECONDS": "0",
                "LOG_LEVEL": "WARNING",
            },
            fault_server=True,
        )

    def stop(self) -> None:
        if self.args.logs:
            import shutil

            Path(self.args.logs).mkdir(parents=True, exist_ok=True)
            for log in self.portal.logs:
                shutil.copy(log, Path(self.args.logs) / log.name)
        for step in (self.portal.close, self.http.close, self.redis.stop, self.postgres.close):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - clean up the rest regardless
                print(f"cleanup: {exc!r}", file=sys.stderr)

    # -- load ------------------------------------------------------------------------------

    async def user(self, index: int) -> None:
        fixtures = self.portal.fixtures
        name, password = fixtures["users"][index], fixtures["password"]
        rng = random.Random(index)
        weights = [weight for weight, *_ in MIX]
        session = None
        while self.loading():
            try:
                if session is None:
                    session = await login(self.portal.base_url, name, password)
                async with Playground(self.portal.base_url, session) as page:
                    while self.loading():
                        _, server, tool, arguments = rng.choices(MIX, weights)[0]
                        await self.one_call(page, fixtures["servers"][server], tool, arguments, index)
            except Exception as exc:  # noqa: BLE001 - a broken socket or login: count it, come back
                self.client_errors[_kind(exc)] += 1
                self.after_fault[f"{_kind(exc)} after {self.last_fault}"] += 1
                await asyncio.sleep(0.5)

    async def one_call(self, page: Playground, server: int, tool: str, arguments: dict[str, Any], index: int) -> None:
        page._refs += 1
        ref = f"s{page._refs}"
        await page.ws.send(
            json.dumps({"type": "call", "ref": ref, "server": server, "tool": tool, "arguments": arguments})
        )
        call_id = None
        async with asyncio.timeout(CALL_WAIT):
            while True:
                if call_id is not None and index == 0 and self.drop_next.is_set():
                    self.drop_next.clear()
                    self.faults["drop_socket"] += 1
                    await page.ws.close()  # the page goes away mid-call; the user comes back at once
                    raise ConnectionResetError("socket dropped on purpose")
                event = json.loads(await page.ws.recv())
                kind = event.get("type")
                if kind == "call.accepted" and event.get("ref") == ref:
                    call_id = event["call"]
                    self.accepted.add(call_id)
                elif kind == "call.ended" and event.get("call") == call_id:
                    self.ended[event["status"]] += 1
                    return
                elif kind == "error" and event.get("ref") == ref:
                    self.client_errors[f"refused: {event.get('kind', 'error')}"] += 1
                    return

    def round_pending(self) -> bool:
        """With --every-fault-once, until each fault has had its turn: a loaded machine's slow
        restarts then lengthen a short run instead of leaving a fault out of it."""
        return self.args.every_fault_once and self.turns < len(FAULTS)

    def loading(self) -> bool:
        return time.monotonic() < self.deadline or self.round_pending()

    # -- faults ----------------------------------------------------------------------------

    async def inject_faults(self) -> None:
        while True:
            await asyncio.sleep(self.args.fault_every)
            if time.monotonic() > self.deadline - 5 and not self.round_pending():
                return
            fault = FAULTS[self.turns % len(FAULTS)]
            self.last_fault = fault
            try:
                await asyncio.to_thread(self.inject, fault)
            except Exception as exc:  # noqa: BLE001 - report it and go on
                self.client_errors[f"fault {fault} failed: {type(exc).__name__}"] += 1
            print(f"[{time.strftime('%H:%M:%S')}] {fault}", flush=True)
            self.turns += 1
            if not self.round_pending():
                # The load goes on a while after the last fault, as after every other one.
                self.deadline = max(self.deadline, time.monotonic() + 5)

    def inject(self, fault: str) -> None:
        if fault == "kill_worker":
            index = self.faults["kill_worker"] % len(self.portal.workers)
            victim = self.portal.workers[index]
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            self.portal.restart_worker(index)
        elif fault == "restart_redis":
            self.redis.restart()
        elif fault == "restart_postgres":
            self.postgres.restart()
        elif fault == "kill_http_server":
            self.http.process.send_signal(signal.SIGKILL)
            self.http.process.wait(10)
            self.http.ensure_alive()
        elif fault == "kill_stdio_servers":
            for worker in self.portal.workers:
                for pid in children(worker.pid):
                    _kill_if_mcp_server(pid)
        elif fault == "drop_socket":
            self.drop_next.set()
            return  # counted by the user who drops it
        self.faults[fault] += 1

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        started = time.monotonic()
        self.deadline = started + self.args.minutes * 60
        users = [asyncio.create_task(self.user(i)) for i in range(self.args.users)]
        faults = asyncio.create_task(self.inject_faults())
        await asyncio.gather(*users)
        faults.cancel()
        load_seconds = time.monotonic() - started
        records = await asyncio.to_thread(self.settle)
        return self.report(load_seconds, records)

    def settle(self) -> dict[str, Any]:
        """Wait for every call to end (the sweep resends lost ones), then count what was lost."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while True:
            records = lost_records(self.database_url)
            if records["unended"] == 0 or time.monotonic() > deadline:
                break
            time.sleep(2)
        import psycopg

        with psycopg.connect(self.database_url) as conn:
            ids = {str(row[0]) for row in conn.execute("SELECT id FROM mcp_sessions_toolcall")}
        records["missing"] = len(self.accepted - ids)
        records["rows"] = len(ids)
        return records

    def report(self, load_seconds: float, records: dict[str, Any]) -> dict[str, Any]:
        lost = records["missing"] + records["unended"] + records["unaudited"]
        return {
            "minutes": round(load_seconds / 60, 2),
            "users": self.args.users,
            "calls_accepted": len(self.accepted),
            "calls_completed_seen_by_clients": sum(self.ended.values()),
            "ended_by_status_seen_by_clients": dict(self.ended),
            "records": records["rows"],
            "records_by_status": records["statuses"],
            "errors_by_kind": records["error_kinds"],
            "client_side": dict(self.client_errors),
            "client_side_by_last_fault": dict(self.after_fault),
            "error_examples": records["examples"],
            "faults_injected": dict(self.faults),
            "records_lost": lost,
            "lost_detail": {k: records[k] for k in ("missing", "unended", "unaudited")},
            "unended_rows": records["unended_rows"],
            "http_server_restarts": len(self.http.restarts),
        }


def _kind(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "client gave up waiting for call.ended"
    code = getattr(getattr(exc, "rcvd", None), "code", None)
    return f"socket: {type(exc).__name__}" + (f" {code}" if code else "")


def _kill_if_mcp_server(pid: int) -> None:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return
    if b"sessions.mcp.demo_server" in cmdline or b"tests.servers.fault_server" in cmdline:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Soak: {result['minutes']} min, {result['users']} users, distributed (2 workers)",
        "",
        "| what | figure |",
        "| --- | --- |",
        f"| calls accepted | {result['calls_accepted']} |",
        f"| calls completed (call.ended seen by the client) | {result['calls_completed_seen_by_clients']} |",
        f"| records in the database | {result['records']} |",
        f"| records by status | {_pairs(result['records_by_status'])} |",
        f"| errors by kind (records) | {_pairs(result['errors_by_kind'])} |",
        f"| client side | {_pairs(result['client_side'])} |",
        f"| faults injected | {_pairs(result['faults_injected'])} |",
        f"| **records lost** | **{result['records_lost']}** ({_pairs(result['lost_detail'])}) |",
    ]
    if result["unended_rows"]:
        # What a lost call was doing, to find it in the logs (--logs): id, tool, status, worker, times.
        lines += ["", "Never ended (id, tool, status, worker, created, started):"]
        lines += [f"- {' '.join(row)}" for row in result["unended_rows"]]
    return "\n".join(lines)


def _pairs(mapping: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(mapping.items(), key=lambda kv: -kv[1])) or "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument("--fault-every", type=float, default=20.0, help="seconds between fault injections")
    parser.add_argument(
        "--every-fault-once", action="store_true", help="go on past --minutes until each fault was injected once"
    )
    parser.add_argument("--logs", help="copy the portal's logs into this folder at the end")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "soak-latest.json"))
    args = parser.parse_args(argv)
    missing = services.available()
    if missing:
        print(f"soak skipped: {missing}", file=sys.stderr)
        return 0
    soak = Soak(args)
    soak.start()
    try:
        result = asyncio.run(soak.run())
    finally:
        soak.stop()
    result["commit"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    return 1 if result["records_lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
