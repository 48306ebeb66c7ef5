"""`make bench`: the portal path side by side with a direct SDK call, in one run.

    python -m bench [--quick] [--modes embedded,distributed] [--out bench/results/latest.json]

What it measures (docs/performance.md explains each number):
1. latency of echo, stdio and Streamable HTTP: direct SDK call on a warm session vs the portal
   path (login form → WebSocket → consumer → worker → server → back) on a warm connection;
2. throughput with 10, 50 and 200 users (distinct accounts, one WebSocket each) calling echo
   in a loop, in the embedded and the distributed mode;
3. cold start: the first call of a new (server, user) against the next one;
4. RSS per idle pooled connection (stdio, HTTP) at 10 and 100 connections;
5. large output: time and peak memory for 1 MB and 10 MB results;
6. the MCP endpoint: the same SDK client and load loop straight to the demo HTTP server and through
   the portal's `/mcp/<server>/`, latency in both eras and 50 clients' throughput (2026-07-28 era);
7. 1,000 MCP clients, one person's token each, held open through `/mcp/<server>/` for a minute,
   each calling echo with a think time between calls (bench/clients.py), in both modes.
It counts the pools' connection opens around every timed window: warm calls must not open any.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import websockets

from bench import clients, direct, endpoint
from bench.client import Playground, login
from bench.stack import (
    BENCH_PG,
    BENCH_REDIS,
    PYTHON,
    ROOT,
    DemoHttpServer,
    Portal,
    cpu_seconds,
    peak_rss_mb,
    reset_peak_rss,
    rss_mb,
    start_portal,
)
from bench.stats import fmt, summary_ms, table

MB = 1024 * 1024
PHASES = ("latency", "cold", "large", "throughput", "memory", "mcp", "clients")
CALL_TIMEOUT = 60.0


@dataclass
class Plan:
    calls: int
    warmup: int
    levels: tuple[int, ...]
    seconds: float
    cold_users: int
    large_sizes: tuple[int, ...]
    large_repeats: int
    memory_counts: str
    # The clients series: how many clients, held for how long, with what mean think time (s).
    clients: int
    clients_seconds: float
    think: float

    @property
    def accounts(self) -> int:
        return 1 + self.cold_users + max(self.levels)


FULL = Plan(2000, 100, (10, 50, 200), 10.0, 5, (1 * MB, 10 * MB), 3, "10,100", 1000, 60.0, 5.0)
# --quick: a handful of calls, for the smoke test; the 50-user level stays, so every key has a value.
QUICK = Plan(20, 3, (50,), 2.0, 1, (1 * MB,), 1, "2,4", 20, 3.0, 0.5)


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the portal path -------------------------------------------------------------------------


async def _login_all(portal: Portal, count: int) -> list[str]:
    gate = asyncio.Semaphore(8)
    users = portal.fixtures["users"][:count]

    async def one(name: str) -> str:
        async with gate:
            return await login(portal.base_url, name, portal.fixtures["password"])

    return await asyncio.gather(*(one(name) for name in users))


async def _echo(ws: Playground, server: int, message: str) -> float:
    event, elapsed = await asyncio.wait_for(ws.call(server, "echo", {"message": message}), CALL_TIMEOUT)
    if event["status"] != "succeeded":
        raise RuntimeError(f"echo ended {event['status']}: {event.get('error')}")
    return elapsed


async def portal_latency(portal: Portal, session: str, plan: Plan, http_url: str) -> dict[str, Any]:
    """Portal calls and direct SDK calls to the same server, alternating one for one.

    Alternating puts both series under the same load from whatever else runs on the machine,
    so their difference is the portal's and not the neighbours'.
    """
    out: dict[str, Any] = {}
    async with Playground(portal.base_url, session) as ws:
        for transport, server in portal.fixtures["servers"].items():
            async with direct.client_for(transport, http_url) as sdk:
                for index in range(plan.warmup):
                    await _echo(ws, server, f"warm {index}")
                    await direct.echo(sdk, f"warm {index}")
                opened = portal.connections_opened()
                # CPU the portal's own processes spend per call: on a machine shared with other work,
                # a steadier measure of what a change saves than wall-clock latency.
                cpu = cpu_seconds(portal.pids)
                samples, baseline = [], []
                for index in range(plan.calls):
                    samples.append(await _echo(ws, server, f"hello {index}"))
                    baseline.append(await direct.echo(sdk, f"hello {index}"))
                cpu = cpu_seconds(portal.pids) - cpu
            out[transport] = {
                **summary_ms(samples),
                "direct": summary_ms(baseline),
                "portal_cpu_ms_per_call": round(cpu * 1000 / plan.calls, 3),
                "handshakes": portal.connections_opened() - opened,
            }
    return out


async def portal_cold_start(portal: Portal, sessions: list[str]) -> dict[str, Any]:
    cold: dict[str, list[float]] = {"stdio": [], "http": []}
    warm: dict[str, list[float]] = {"stdio": [], "http": []}
    for session in sessions:
        async with Playground(portal.base_url, session) as ws:
            for transport, server in portal.fixtures["servers"].items():
                cold[transport].append(await _echo(ws, server, "first"))
                warm[transport].append(await _echo(ws, server, "second"))
    return {t: {"cold": summary_ms(cold[t]), "warm": summary_ms(warm[t])} for t in cold}


async def portal_large(portal: Portal, session: str, plan: Plan) -> list[dict[str, Any]]:
    """Time and the worker's peak memory for big results; reports truncation once it exists (issue 6).

    A result the portal cannot deliver is measured too: the time until the socket closed, and why.
    """
    rows = []
    server = portal.fixtures["servers"]["stdio"]
    pids = portal.worker_pids
    for size in plan.large_sizes:
        times, peaks, received, truncation_ms, outcome = [], [], 0, None, "delivered"
        for _ in range(plan.large_repeats):
            async with Playground(portal.base_url, session) as ws:
                await _echo(ws, server, "warm")
                base = {pid: rss_mb(pid) for pid in pids}
                peak_known = all(reset_peak_rss(pid) for pid in pids)
                started = time.perf_counter()
                try:
                    event, elapsed = await asyncio.wait_for(
                        ws.call(server, "big", {"size_bytes": size}), CALL_TIMEOUT * 2
                    )
                except websockets.ConnectionClosed as exc:
                    elapsed, event = time.perf_counter() - started, None
                    outcome = f"WebSocket closed {exc.rcvd.code if exc.rcvd else ''}".strip()
                times.append(elapsed)
                if peak_known:
                    peaks.append(max(peak_rss_mb(pid) - base[pid] for pid in pids))
                if event is not None:
                    if event["status"] != "succeeded":
                        raise RuntimeError(f"big({size}) ended {event['status']}: {event.get('error')}")
                    if "result" not in event:
                        # Over the socket's 1 MB: the event came without its result (docs/websocket-protocol.md).
                        outcome = "result omitted from the event (over 1 MB)"
                        continue
                    received = sum(len(block.get("text", "")) for block in event["result"]["content"])
                    truncation_ms = ((event.get("details") or {}).get("truncated") or {}).get("ms", truncation_ms)
        rows.append(
            {
                "size_bytes": size,
                "portal_ms": summary_ms(times)["p50"],
                "worker_peak_extra_mb": round(max(peaks), 1) if peaks else None,
                "outcome": outcome,
                "received_bytes": received,
                "truncated": outcome == "delivered" and received < size,
                "truncation_ms": truncation_ms,
            }
        )
    return rows


async def portal_throughput(portal: Portal, sessions: list[str], owners: set[str], seconds: float) -> dict[str, Any]:
    server = portal.fixtures["servers"]["http"]
    users = len(sessions)
    sockets = [Playground(portal.base_url, s) for s in sessions]
    entered = await asyncio.gather(*(ws.__aenter__() for ws in sockets), return_exceptions=True)
    # A user who cannot even open the WebSocket is an error of this level, not a crash of the bench.
    errors: list[str] = [f"connect: {type(r).__name__}: {r}" for r in entered if isinstance(r, BaseException)]
    sockets = [ws for ws, r in zip(sockets, entered, strict=True) if not isinstance(r, BaseException)]
    try:
        # Warm every (server, user) connection in every worker (tasks go to whichever worker is
        # free), so the window measures warm calls only.
        for _ in range(40):
            warm = await asyncio.gather(*(_echo(ws, server, "warm") for ws in sockets), return_exceptions=True)
            errors += [f"warm-up: {type(r).__name__}: {r}" for r in warm if isinstance(r, BaseException)]
            if all(owners <= seen for seen in portal.owners_connected("echo-http")):
                break
        samples: list[float] = []
        stop = asyncio.Event()

        async def loop(ws: Playground) -> None:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    await _echo(ws, server, "x")
                except Exception as exc:  # noqa: BLE001 - counted; the user goes on calling
                    errors.append(f"{type(exc).__name__}: {exc}")
                    if isinstance(exc, asyncio.TimeoutError | ConnectionError):
                        return
                    continue
                samples.append(time.perf_counter() - started)

        opened = portal.connections_opened()
        cpu = cpu_seconds(portal.pids)
        began = time.perf_counter()
        tasks = [asyncio.create_task(loop(ws)) for ws in sockets]
        await asyncio.sleep(seconds)
        done = len(samples)
        elapsed = time.perf_counter() - began
        cpu = cpu_seconds(portal.pids) - cpu
        stop.set()
        await asyncio.gather(*tasks)
        return {
            "users": users,
            "calls_per_s": round(done / elapsed, 1),
            **{k: v for k, v in summary_ms(samples[:done]).items() if k in ("p50", "p95", "p99")},
            "portal_cpu_ms_per_call": round(cpu * 1000 / done, 3) if done else None,
            "errors": len(errors),
            "error_examples": sorted(set(errors))[:3],
            "handshakes": portal.connections_opened() - opened,
        }
    finally:
        await asyncio.gather(*(ws.__aexit__(None, None, None) for ws in sockets), return_exceptions=True)


async def measure_portal(mode: str, plan: Plan, http_url: str, phases: set[str]) -> dict[str, Any]:
    log(f"{mode}: starting the portal")
    accounts = plan.accounts if phases & {"throughput", "mcp"} else 1 + plan.cold_users
    # The clients series has a person per client; only the other phases' accounts log in.
    portal = start_portal(mode, max(accounts, plan.clients if "clients" in phases else 0), http_url)
    # To profile a phase, attach to these: py-spy record --gil --pid PID (docs/performance.md).
    log(f"{mode}: portal processes {' '.join(map(str, portal.pids))}")
    try:
        sessions = await _login_all(portal, accounts)
        log(f"{mode}: {len(sessions)} accounts logged in through the login form")
        result: dict[str, Any] = {"latency": {}, "throughput": {}}
        if "latency" in phases:
            log(f"{mode}: latency, {plan.calls} calls per transport")
            result["latency"] = await portal_latency(portal, sessions[0], plan, http_url)
        # Cold start and large output are the same code in both modes: measured once, embedded.
        if "cold" in phases and mode == "embedded":
            log(f"{mode}: cold start")
            result["cold_start"] = await portal_cold_start(portal, sessions[1 : 1 + plan.cold_users])
        if "large" in phases and mode == "embedded":
            log(f"{mode}: large output")
            result["large_output"] = await portal_large(portal, sessions[0], plan)
        first = 1 + plan.cold_users
        for level in plan.levels if "throughput" in phases else ():
            log(f"{mode}: throughput with {level} users for {plan.seconds:g} s")
            owners = {f"user:{pk}" for pk in portal.fixtures["user_ids"][first : first + level]}
            result["throughput"][str(level)] = await portal_throughput(
                portal, sessions[first : first + level], owners, plan.seconds
            )
            if result["throughput"][str(level)]["errors"]:
                log(f"{mode}: errors with {level} users: {result['throughput'][str(level)]['error_examples']}")
        if "mcp" in phases:
            result["mcp"] = await measure_endpoint(portal, plan, http_url, first)
        if "clients" in phases:
            result["clients"] = await measure_clients(portal, plan)
        result["handshakes_during_warm_calls"] = (
            sum(v["handshakes"] for v in result["latency"].values())
            + sum(v["handshakes"] for v in result["throughput"].values())
            + sum(v["handshakes"] for v in (dig(result, "mcp", "latency") or {}).values())
            + (dig(result, "mcp", "throughput", "handshakes") or 0)
            + (dig(result, "clients", "handshakes") or 0)
        )
        return result
    except BaseException:
        for path in portal.logs:
            log(f"{mode}: the last lines of {path.name}:\n{path.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        portal.close()


async def measure_endpoint(portal: Portal, plan: Plan, http_url: str, first: int) -> dict[str, Any]:
    """The MCP endpoint series: latency in both eras, then the 2026 era's throughput with one
    client per person, through `/mcp/<server>/` and direct with the same loop."""
    server = fixtures_http_server()
    log(f"{portal.mode}: MCP endpoint latency, {plan.calls} calls per era")
    latency = await endpoint.latency(portal, server, http_url, plan.calls, plan.warmup)
    level = 50 if 50 in plan.levels else max(plan.levels)
    tokens = portal.fixtures["tokens"][first : first + level]
    log(f"{portal.mode}: MCP endpoint throughput with {len(tokens)} clients for {plan.seconds:g} s")
    url = endpoint.endpoint_url(portal, server)
    through = await endpoint.throughput(url, tokens, plan.seconds, "2026-07-28", portal)
    if through["errors"]:
        log(f"{portal.mode}: MCP endpoint errors: {through['error_examples']}")
    direct_run = await endpoint.throughput(http_url, [None] * len(tokens), plan.seconds, "2026-07-28")
    return {"latency": latency, "throughput": through, "direct_throughput": direct_run}


async def measure_clients(portal: Portal, plan: Plan) -> dict[str, Any]:
    """`plan.clients` MCP clients, a person each, held through `/mcp/<server>/` (bench/clients.py)."""
    tokens = portal.fixtures["tokens"][: plan.clients]
    log(
        f"{portal.mode}: {len(tokens)} MCP clients held for {plan.clients_seconds:g} s, "
        f"think time {plan.think:g} s on average"
    )
    url = endpoint.endpoint_url(portal, fixtures_http_server())
    run = await clients.run(portal, url, tokens, plan.clients_seconds, plan.think, log)
    if run["errors"]:
        log(f"{portal.mode}: errors of the {len(tokens)} clients: {run['error_examples']}")
        log(f"{portal.mode}: the portal's last warnings: {run.get('portal_log_examples')}")
    return run


def fixtures_http_server() -> str:
    from bench.fixtures import HTTP_SERVER

    return HTTP_SERVER


# -- the direct path and memory ------------------------------------------------------------


async def measure_direct(plan: Plan, http_url: str, phases: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"large_output": [], "throughput": {}}
    for size in plan.large_sizes if "large" in phases else ():
        elapsed, received = await direct.large("stdio", http_url, size)
        out["large_output"].append({"size_bytes": size, "direct_ms": round(elapsed * 1000, 1), "received": received})
    for level in plan.levels if "throughput" in phases else ():
        log(f"direct: throughput with {level} sessions")
        run = await direct.throughput(http_url, level, plan.seconds)
        out["throughput"][str(level)] = {
            "calls_per_s": round(len(run["samples"]) / run["elapsed"], 1),
            **{k: v for k, v in summary_ms(run["samples"]).items() if k in ("p50", "p99")},
            "errors": run["errors"],
        }
    return out


def measure_memory(plan: Plan, http_url: str) -> dict[str, Any]:
    out = {}
    for transport in ("stdio", "http"):
        log(f"memory: {transport} connections at {plan.memory_counts}")
        run = subprocess.run(
            [PYTHON, "-m", "bench.memory", "--transport", transport, "--counts", plan.memory_counts, "--url", http_url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        if run.returncode != 0:
            raise RuntimeError(f"memory bench failed:\n{run.stderr[-3000:]}")
        out[transport] = json.loads(run.stdout)
    return out


# -- the report -----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    mem_kb = 0
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    cpu = ""
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout
    except OSError:
        commit = ""
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_before": os.getloadavg()[0],
        "commit": commit.strip(),
    }


def dig(data: Any, *path: str | int) -> Any:
    """data[path[0]][path[1]]…, or None where a phase was skipped or failed."""
    for step in path:
        try:
            data = data[step]
        except (KeyError, IndexError, TypeError):
            return None
    return data


def minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 3)


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The keys make and CI read; each is named in docs/performance.md."""
    dist = "distributed" if dig(report, "distributed", "throughput") else "embedded"
    level50 = dig(report, dist, "throughput", "50") or {}
    stdio_worker = dig(report, "memory", "stdio", -1, "worker_mb_per_connection")
    stdio_child = dig(report, "memory", "stdio", -1, "child_rss_mb_per_connection")
    direct_p50 = dig(report, "embedded", "latency", "stdio", "direct", "p50")
    portal_p50 = dig(report, "embedded", "latency", "stdio", "p50")
    keys = {
        "direct_p50_ms": direct_p50,
        "portal_p50_ms": portal_p50,
        "overhead_p50_ms": minus(portal_p50, direct_p50),
        "overhead_p99_ms": minus(
            dig(report, "embedded", "latency", "stdio", "p99"),
            dig(report, "embedded", "latency", "stdio", "direct", "p99"),
        ),
        "overhead_ratio_p50": round(portal_p50 / direct_p50, 2) if portal_p50 and direct_p50 else None,
        "direct_http_p50_ms": dig(report, "embedded", "latency", "http", "direct", "p50"),
        "portal_http_p50_ms": dig(report, "embedded", "latency", "http", "p50"),
        "overhead_http_p50_ms": minus(
            dig(report, "embedded", "latency", "http", "p50"),
            dig(report, "embedded", "latency", "http", "direct", "p50"),
        ),
        "overhead_http_p99_ms": minus(
            dig(report, "embedded", "latency", "http", "p99"),
            dig(report, "embedded", "latency", "http", "direct", "p99"),
        ),
        "calls_per_s_50_users": level50.get("calls_per_s"),
        "errors_50_users": level50.get("errors"),
        "throughput_mode": dist,
        "cold_start_ms": dig(report, "embedded", "cold_start", "stdio", "cold", "p50"),
        "cold_start_http_ms": dig(report, "embedded", "cold_start", "http", "cold", "p50"),
        "warm_after_cold_ms": dig(report, "embedded", "cold_start", "stdio", "warm", "p50"),
        "rss_per_stdio_connection_mb": round(stdio_worker + stdio_child, 2)
        if stdio_worker is not None and stdio_child is not None
        else None,
        "rss_per_stdio_connection_worker_mb": stdio_worker,
        "rss_per_stdio_connection_child_mb": stdio_child,
        "rss_per_http_connection_mb": dig(report, "memory", "http", -1, "worker_mb_per_connection"),
        "handshakes_during_warm_calls": sum(
            dig(report, mode, "handshakes_during_warm_calls") or 0 for mode in ("embedded", "distributed")
        ),
    }
    if dig(report, "distributed", "latency"):
        dist = dig(report, "distributed", "latency", "stdio")
        keys["distributed_portal_p50_ms"] = dist["p50"]
        keys["distributed_overhead_p50_ms"] = minus(dist["p50"], dist["direct"]["p50"])
        keys["distributed_overhead_p99_ms"] = minus(dist["p99"], dist["direct"]["p99"])
    for row in dig(report, "embedded", "large_output") or []:
        label = f"{row['size_bytes'] // MB}mb" if row["size_bytes"] >= MB else f"{row['size_bytes']}b"
        keys[f"large_{label}_ms"] = row["portal_ms"]
        keys[f"large_{label}_peak_mb"] = row["worker_peak_extra_mb"]
    for mode, prefix in (("embedded", ""), ("distributed", "distributed_")):
        series = dig(report, mode, "mcp")
        if not series:
            continue
        modern, handshake = dig(series, "latency", "2026-07-28") or {}, dig(series, "latency", "legacy") or {}
        keys[f"{prefix}mcp_overhead_p50_ms"] = minus(modern.get("p50"), dig(modern, "direct", "p50"))
        keys[f"{prefix}mcp_overhead_p99_ms"] = minus(modern.get("p99"), dig(modern, "direct", "p99"))
        keys[f"{prefix}mcp_handshake_overhead_p50_ms"] = minus(handshake.get("p50"), dig(handshake, "direct", "p50"))
        keys[f"{prefix}mcp_calls_per_s_50_clients"] = dig(series, "throughput", "calls_per_s")
        keys[f"{prefix}mcp_errors_50_clients"] = dig(series, "throughput", "errors")
        keys[f"{prefix}mcp_direct_calls_per_s_50_clients"] = dig(series, "direct_throughput", "calls_per_s")
        keys[f"{prefix}cpu_ms_per_call"] = dig(series, "throughput", "portal_cpu_ms_per_call")
    for mode, prefix in (("embedded", ""), ("distributed", "distributed_")):
        held = dig(report, mode, "clients")
        if not held:
            continue
        # Named for the full run's 1,000 clients; "clients" in the report says how many there were.
        keys[f"{prefix}clients_1000_errors"] = held["errors"]
        keys[f"{prefix}clients_1000_p50_ms"] = held["p50"]
        keys[f"{prefix}clients_1000_p99_ms"] = held["p99"]
        keys[f"{prefix}clients_1000_calls_per_s"] = held["calls_per_s"]
        keys[f"{prefix}clients_1000_cpu_ms_per_call"] = held["portal_cpu_ms_per_call"]
    keys["warm_calls_handshake_free"] = keys["handshakes_during_warm_calls"] == 0
    return keys


def markdown(report: dict[str, Any]) -> str:
    d = report["direct"]
    parts = []
    rows = []
    for mode in ("embedded", "distributed"):
        for transport in ("stdio", "http"):
            p = dig(report, mode, "latency", transport)
            if not p:
                continue
            base = p["direct"]
            rows.append(
                [
                    mode,
                    transport,
                    base["p50"],
                    p["p50"],
                    p["p95"],
                    p["p99"],
                    minus(p["p50"], base["p50"]),
                    minus(p["p99"], base["p99"]),
                    f"{p['p50'] / base['p50']:.1f}×",
                    p.get("portal_cpu_ms_per_call"),
                    p["n"],
                ]
            )
    if rows:
        header = ["mode", "transport", "direct p50", "portal p50", "p95", "p99", "overhead p50", "overhead p99"]
        header += ["ratio p50", "portal CPU per call", "calls"]
        parts += ["### Latency of echo, warm (ms)", "", table(header, rows), ""]
    rows = []
    for level, run in d.get("throughput", {}).items():
        rows.append(["direct SDK", level, run["calls_per_s"], run["p50"], run["p99"], run["errors"], "–", "–"])
    for mode in ("embedded", "distributed"):
        for level, run in (dig(report, mode, "throughput") or {}).items():
            rows.append(
                [
                    mode,
                    level,
                    run["calls_per_s"],
                    run["p50"],
                    run["p99"],
                    run["errors"],
                    run["handshakes"],
                    run.get("portal_cpu_ms_per_call"),
                ]
            )
    if rows:
        parts += ["### Throughput, echo over Streamable HTTP, one WebSocket per account", ""]
        header = ["path", "users", "calls/s", "p50 ms", "p99 ms", "errors", "handshakes", "portal CPU ms/call"]
        parts += [table(header, rows), ""]
    cold = dig(report, "embedded", "cold_start")
    if cold:
        rows = [[t, v["cold"]["p50"], v["cold"]["max"], v["warm"]["p50"], v["cold"]["n"]] for t, v in cold.items()]
        parts += ["### Cold start (embedded): first call of a new (server, user) vs the next (ms)", ""]
        parts += [table(["transport", "first call p50", "first call max", "next call p50", "users"], rows), ""]
    if report.get("memory"):
        rows = []
        for transport, runs in report["memory"].items():
            for run in runs:
                local = transport == "stdio"
                rows.append(
                    [
                        transport,
                        run["connections"],
                        run["worker_mb_per_connection"],
                        run["child_rss_mb_per_connection"] if local else "–",
                        run["child_pss_mb_per_connection"] if local else "–",
                    ]
                )
        parts += ["### Memory per idle pooled connection (MB)", ""]
        parts += [table(["transport", "connections", "worker RSS", "child RSS", "child PSS"], rows), ""]
    large = dig(report, "embedded", "large_output")
    if large:
        direct_ms = {row["size_bytes"]: row["direct_ms"] for row in d.get("large_output", [])}
        rows = [
            [
                f"{row['size_bytes'] / MB:g} MB",
                direct_ms.get(row["size_bytes"]),
                row["portal_ms"],
                row["worker_peak_extra_mb"],
                row["outcome"],
                row["truncated"],
                row["truncation_ms"],
            ]
            for row in large
        ]
        header = ["result", "direct ms", "portal ms", "portal peak +MB", "outcome", "truncated", "truncation ms"]
        parts += ["### Large output (stdio, embedded)", "", table(header, rows), ""]
    h = report["headline"]
    verdict = "PASS" if h["warm_calls_handshake_free"] else "FAIL"
    parts.append(
        f"Warm calls never handshake again: **{verdict}** ({h['handshakes_during_warm_calls']} connection opens "
        "during the timed windows)."
    )
    rows = []
    for mode in ("embedded", "distributed"):
        for era, p in (dig(report, mode, "mcp", "latency") or {}).items():
            base = p["direct"]
            rows.append(
                [
                    mode,
                    era,
                    base["p50"],
                    p["p50"],
                    p["p99"],
                    minus(p["p50"], base["p50"]),
                    minus(p["p99"], base["p99"]),
                    p["portal_cpu_ms_per_call"],
                    p["n"],
                ]
            )
    if rows:
        header = ["mode", "era", "direct p50", "through /mcp/<server>/ p50", "p99", "overhead p50", "overhead p99"]
        parts += [
            "### The MCP endpoint: latency of echo, warm (ms)",
            "",
            table(header + ["portal CPU per call", "calls"], rows),
            "",
        ]
    rows = []
    for mode in ("embedded", "distributed"):
        series = dig(report, mode, "mcp") or {}
        for label, run in (("direct SDK", series.get("direct_throughput")), (mode, series.get("throughput"))):
            if run:
                rows.append(
                    [
                        label,
                        run["clients"],
                        run["calls_per_s"],
                        run["p50"],
                        run["p99"],
                        run["errors"],
                        run.get("portal_cpu_ms_per_call"),
                    ]
                )
    if rows:
        parts += ["### The MCP endpoint: throughput, one SDK client each, 2026-07-28 era", ""]
        parts += [table(["path", "clients", "calls/s", "p50", "p99", "errors", "portal CPU per call"], rows), ""]
    rows = []
    for mode in ("embedded", "distributed"):
        held = dig(report, mode, "clients")
        if held:
            rows.append(
                [
                    mode,
                    held["clients"],
                    held["connected"],
                    fmt(held["seconds"], 0),
                    held["think_s"],
                    held["calls"],
                    held["calls_per_s"],
                    held["p50"],
                    held["p99"],
                    held["max"],
                    held["errors"],
                    held["handshakes"],
                    held["portal_cpu_ms_per_call"],
                    held["client_cpu_share"],
                ]
            )
    if rows:
        parts += ["### The MCP endpoint: clients held open, one person's token each, echo with a think time", ""]
        header = ["mode", "clients", "connected", "window s", "think s", "calls", "calls/s", "p50 ms", "p99 ms"]
        header += ["max ms", "errors", "handshakes", "portal CPU ms/call", "clients' CPU (cores)"]
        parts += [table(header, rows), ""]
    return "\n".join(parts)


def distributed_stores_missing() -> str | None:
    """Why the distributed mode cannot be measured here, or None when PostgreSQL and Redis answer."""
    import psycopg
    import redis

    try:
        psycopg.connect(f"{BENCH_PG}/postgres", connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at {BENCH_PG} does not answer ({type(exc).__name__})"
    try:
        redis.Redis.from_url(BENCH_REDIS, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:
        return f"Redis at {BENCH_REDIS} does not answer ({type(exc).__name__})"
    return None


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    plan = QUICK if args.quick else FULL
    if args.calls:
        plan.calls = args.calls
    if args.levels:
        plan.levels = tuple(int(level) for level in args.levels.split(","))
    if args.seconds:
        plan.seconds = args.seconds
    if args.clients:
        plan.clients = args.clients
    if args.clients_seconds:
        plan.clients_seconds = args.clients_seconds
    if args.think is not None:
        plan.think = args.think
    modes = [m for m in args.modes.split(",") if m]
    phases = set(args.phases.split(","))
    if "distributed" in modes and (why := distributed_stores_missing()):
        log(f"skipping the distributed mode: {why}; start them as .ci/run does")
        modes.remove("distributed")
    report: dict[str, Any] = {"machine": machine(), "quick": args.quick, "plan": plan.__dict__}
    demo = DemoHttpServer()
    try:
        report["direct"] = await measure_direct(plan, demo.url, phases)
        for mode in modes:
            demo.ensure_alive()
            report[mode] = await measure_portal(mode, plan, demo.url, phases)
        if "memory" in phases:
            demo.ensure_alive()
            report["memory"] = measure_memory(plan, demo.url)
        report["demo_server_restarts"] = demo.restarts
    except BaseException:
        log(f"the demo HTTP server's log ends:\n{Path(demo.log.name).read_text(errors='replace')[-2000:]}")
        raise
    finally:
        demo.close()
    report["headline"] = headline(report)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a handful of calls, for the smoke test")
    parser.add_argument("--modes", default="embedded,distributed")
    parser.add_argument("--phases", default=",".join(PHASES), help="a subset of " + ",".join(PHASES))
    parser.add_argument("--calls", type=int, help="calls per latency series (default 2000; --quick 20)")
    parser.add_argument("--levels", help="throughput levels, e.g. 10,50,200")
    parser.add_argument("--seconds", type=float, help="length of each throughput window")
    parser.add_argument("--clients", type=int, help="clients held open in the clients phase (default 1000; --quick 20)")
    parser.add_argument("--clients-seconds", type=float, help="how long they are held (default 60; --quick 3)")
    parser.add_argument("--think", type=float, help="mean seconds between one client's calls (default 5; --quick 0.5)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "latest.json"))
    args = parser.parse_args(argv)
    if "embedded" not in args.modes.split(","):
        parser.error("the embedded mode is always measured (the headline numbers come from it)")
    if set(args.phases.split(",")) - set(PHASES):
        parser.error(f"--phases takes some of {','.join(PHASES)}")
    # Stopped from outside, still stop every process the bench started (the finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    report = asyncio.run(main_async(args))
    report["seconds"] = round(time.monotonic() - started, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {**report["headline"], "report": report}
    out.write_text(json.dumps(payload, indent=2) + "\n")
    print(markdown(report))
    print(f"\nWrote {out} in {fmt(report['seconds'], 0)} s.")
    return 0 if report["headline"]["warm_calls_handshake_free"] else 1


if __name__ == "__main__":
    sys.exit(main())
