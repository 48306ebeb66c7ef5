"""The MCP endpoint series: one SDK client and one load loop, straight to the demo HTTP server and
through the portal's `/mcp/<server>/` to the same server, in both protocol eras (docs/performance.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench.stack import Portal, cpu_seconds
from bench.stats import summary_ms

ERAS = ("2026-07-28", "legacy")


@asynccontextmanager
async def session(url: str, token: str | None, mode: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(60)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


async def echo(client: Client, message: str) -> float:
    started = time.perf_counter()
    result = await client.call_tool("echo", {"message": message})
    if result.is_error:
        raise RuntimeError(f"echo failed: {result.content}")
    return time.perf_counter() - started


def endpoint_url(portal: Portal, server: str) -> str:
    return f"{portal.base_url}/mcp/{server}/"


async def latency(portal: Portal, server: str, http_url: str, calls: int, warmup: int) -> dict[str, Any]:
    """Through the endpoint and direct, alternating one for one (so both share the machine's load)."""
    out: dict[str, Any] = {}
    token = portal.fixtures["tokens"][0]
    for mode in ERAS:
        async with session(endpoint_url(portal, server), token, mode) as through, session(http_url, None, mode) as sdk:
            for index in range(warmup):
                await echo(through, f"warm {index}")
                await echo(sdk, f"warm {index}")
            opened = portal.connections_opened()
            cpu = cpu_seconds(portal.pids)
            samples, baseline = [], []
            for index in range(calls):
                samples.append(await echo(through, f"hello {index}"))
                baseline.append(await echo(sdk, f"hello {index}"))
            cpu = cpu_seconds(portal.pids) - cpu
        out[mode] = {
            **summary_ms(samples),
            "direct": summary_ms(baseline),
            "portal_cpu_ms_per_call": round(cpu * 1000 / calls, 3),
            "handshakes": portal.connections_opened() - opened,
        }
    return out


async def throughput(
    url: str, tokens: list[str | None], seconds: float, mode: str, portal: Portal | None = None
) -> dict[str, Any]:
    """One client per token (None: direct), each calling echo in a loop for `seconds`."""
    samples: list[float] = []
    errors: list[str] = []
    ready = asyncio.Barrier(len(tokens) + 1)
    stop = asyncio.Event()

    async def client(token: str | None) -> None:
        try:
            async with session(url, token, mode) as sdk:
                await echo(sdk, "warm")
                await ready.wait()
                while not stop.is_set():
                    try:
                        samples.append(await echo(sdk, "x"))
                    except Exception as exc:  # noqa: BLE001 - counted, the client goes on
                        errors.append(f"{type(exc).__name__}: {exc}"[:200])
        except Exception as exc:  # noqa: BLE001 - a client that cannot even connect is an error of the level
            errors.append(f"connect: {type(exc).__name__}: {exc}"[:200])
            await ready.wait()

    tasks = [asyncio.create_task(client(token)) for token in tokens]
    await ready.wait()
    cpu = cpu_seconds(portal.pids) if portal else 0.0
    opened = portal.connections_opened() if portal else 0
    began = time.perf_counter()
    await asyncio.sleep(seconds)
    done = len(samples)
    elapsed = time.perf_counter() - began
    cpu = (cpu_seconds(portal.pids) - cpu) if portal else 0.0
    stop.set()
    await asyncio.gather(*tasks)
    return {
        "clients": len(tokens),
        "calls_per_s": round(done / elapsed, 1),
        **{k: v for k, v in summary_ms(samples[:done]).items() if k in ("p50", "p95", "p99")},
        "portal_cpu_ms_per_call": round(cpu * 1000 / done, 3) if portal and done else None,
        "errors": len(errors),
        "error_examples": sorted(set(errors))[:3],
        "handshakes": (portal.connections_opened() - opened) if portal else 0,
    }
