"""The physical limit: the same calls made straight through the SDK, on a warm session."""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from mcp import Client, StdioServerParameters

from bench.stack import ROOT


def client_for(transport: str, http_url: str) -> Client:
    if transport == "stdio":
        server: Any = StdioServerParameters(
            command=sys.executable, args=["-m", "sessions.mcp.demo_server"], cwd=str(ROOT)
        )
    else:
        server = http_url
    return Client(server, cache=None)


async def echo(client: Client, message: str) -> float:
    """One echo on a warm session; the seconds it took."""
    started = time.perf_counter()
    result = await client.call_tool("echo", {"message": message})
    elapsed = time.perf_counter() - started
    if result.is_error:
        raise RuntimeError("a direct echo failed")
    return elapsed


async def large(transport: str, http_url: str, size: int) -> tuple[float, int]:
    async with client_for(transport, http_url) as client:
        await client.call_tool("echo", {"message": "warm"})
        started = time.perf_counter()
        result = await client.call_tool("big", {"size_bytes": size})
        return time.perf_counter() - started, len(result.content[0].text)


async def throughput(http_url: str, users: int, seconds: float) -> dict[str, Any]:
    """`users` sessions on the HTTP demo server, each calling echo in a loop for `seconds`."""
    samples: list[float] = []
    errors = 0
    ready = asyncio.Barrier(users + 1)
    stop = asyncio.Event()

    async def user() -> None:
        nonlocal errors
        async with client_for("http", http_url) as client:
            await client.call_tool("echo", {"message": "warm"})
            await ready.wait()
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    result = await client.call_tool("echo", {"message": "x"})
                    if result.is_error:
                        errors += 1
                except Exception:  # noqa: BLE001 - counted, the loop goes on
                    errors += 1
                samples.append(time.perf_counter() - started)

    tasks = [asyncio.create_task(user()) for _ in range(users)]
    await ready.wait()
    began = time.perf_counter()
    await asyncio.sleep(seconds)
    stop.set()
    count = len(samples)
    elapsed = time.perf_counter() - began
    await asyncio.gather(*tasks)
    return {"samples": samples[:count], "elapsed": elapsed, "errors": errors}
