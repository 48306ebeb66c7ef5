"""Connection numbers for docs/connections.md: handshakes, warm calls, the era probe, stdio shutdown, expiry.

Run from the project root: `python -m bench.connections` (about a minute; it starts its own servers).
Medians over a few runs; the machine's load moves them, so read them as orders of magnitude.
"""

from __future__ import annotations

import socket
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from sessions.mcp.config import ConnectionKey, Negotiated, ServerConfig
from sessions.mcp.pool import ConnectionPool, PoolSettings
from sessions.mcp.ssrf import LOCAL_NETWORK

ROOT = Path(__file__).resolve().parent.parent
DEMO = (sys.executable, "-m", "sessions.mcp.demo_server")
LEGACY = str(ROOT / "tests" / "servers" / "legacy_server.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve(transport: str, port: int) -> subprocess.Popen:
    process = subprocess.Popen([*DEMO, transport, "--port", str(port)], cwd=ROOT, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return process
        time.sleep(0.05)
    raise TimeoutError(transport)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f}"


def main() -> None:
    pool = ConnectionPool(PoolSettings(health_seconds=0))
    servers = {}
    configs = {
        "stdio": ServerConfig(
            network=LOCAL_NETWORK, name="demo", transport="stdio", command=DEMO[0], args=DEMO[1:], cwd=str(ROOT)
        )
    }
    for transport, path, scheme in (("http", "/mcp", "http"), ("sse", "/sse", "http"), ("websocket", "/", "ws")):
        port = free_port()
        servers[transport] = serve(transport, port)
        configs[transport] = ServerConfig(
            network=LOCAL_NETWORK, name="demo", transport=transport, url=f"{scheme}://127.0.0.1:{port}{path}"
        )
    try:
        print("| transport | era | connect (handshake) ms | warm echo ms |")
        print("|---|---|---|---|")
        for transport, base in configs.items():
            for protocol in ("auto", "legacy"):
                config = replace(base, protocol=protocol)
                connects = [pool.run(pool.probe(config), 60)["handshake_ms"] / 1000 for _ in range(5)]
                key = ConnectionKey.for_owner(1, config, f"bench:{protocol}")
                pool.run(pool.call_tool(key, config, "echo", {"message": "warm up"}), 60)
                calls = []
                for _ in range(30):
                    started = time.perf_counter()
                    pool.run(pool.call_tool(key, config, "echo", {"message": "x"}), 60)
                    calls.append(time.perf_counter() - started)
                era = "2026-07-28" if protocol == "auto" else "handshake"
                print(f"| {transport} | {era} | {ms(statistics.median(connects))} | {ms(statistics.median(calls))} |")
                pool.run(pool.drop(key), 30)

        silent = ServerConfig(
            network=LOCAL_NETWORK,
            name="silent",
            transport="stdio",
            command=sys.executable,
            args=(LEGACY,),
            env={"LEGACY_SILENT_DISCOVER": "1"},
        )
        started = time.perf_counter()
        info = pool.run(pool.probe(silent), 60)
        first = time.perf_counter() - started
        remembered = replace(silent, negotiated=Negotiated.from_dict(info["negotiated"]))
        # "Test connection" (probe) always asks afresh; a pooled connect uses what was remembered.
        key = ConnectionKey.for_owner(2, remembered, "bench")
        started = time.perf_counter()
        pool.run(pool.connection(key, remembered), 60)
        second = time.perf_counter() - started
        print(
            f"\nA server that never answers server/discover: first connect (auto) {ms(first)} ms, "
            f"then with the era remembered {ms(second)} ms"
        )

        for stubborn in (False, True):
            durations = []
            for n in range(3):
                key = ConnectionKey.for_owner(3, configs["stdio"], f"bench:{stubborn}:{n}")
                pool.run(pool.call_tool(key, configs["stdio"], "spawn", {"stubborn": stubborn}), 60)
                started = time.perf_counter()
                pool.run(pool.drop(key), 30)
                durations.append(time.perf_counter() - started)
            what = "a child that ignores SIGINT and SIGTERM" if stubborn else "a child process"
            print(f"Closing a stdio server with {what}: {ms(statistics.median(durations))} ms (median of 3)")

        port = free_port()
        process = serve("http", port)
        config = ServerConfig(
            network=LOCAL_NETWORK, name="demo", transport="http", url=f"http://127.0.0.1:{port}/mcp", protocol="legacy"
        )
        key = ConnectionKey.for_owner(4, config, "bench")
        pool.run(pool.call_tool(key, config, "echo", {"message": "x"}), 60)
        process.terminate()
        process.wait()
        process = serve("http", port)
        started = time.perf_counter()
        outcome = pool.run(pool.call_tool(key, config, "echo", {"message": "x"}), 60)
        print(
            f"A call whose session expired (server restarted): {ms(time.perf_counter() - started)} ms, "
            f"retried={outcome.retried}, {outcome.status}"
        )
        process.terminate()
    finally:
        pool.shutdown()
        for process in servers.values():
            process.terminate()


if __name__ == "__main__":
    main()
