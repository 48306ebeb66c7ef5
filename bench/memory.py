"""RSS per idle pooled connection, measured on the worker's own ConnectionPool.

Run as `python -m bench.memory --transport stdio --counts 10,100 [--url URL]`; prints JSON.
The pool is the one a worker runs (sessions/mcp/pool.py), without Django around it, so the
growth of this process is what each connection costs a worker; a stdio connection's child
process is measured apart (RSS, and PSS, which shares the interpreter's common pages fairly).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys

from bench.stack import ROOT, children, rss_mb
from sessions.mcp.config import ConnectionKey, ServerConfig
from sessions.mcp.pool import ConnectionPool, PoolSettings


def _pss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as handle:
            for line in handle:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _children_memory() -> tuple[float, float]:
    pids = children(os.getpid())
    return sum(rss_mb(pid) for pid in pids), sum(_pss_mb(pid) for pid in pids)


async def measure(config: ServerConfig, counts: list[int]) -> list[dict]:
    # Local connections open 3 at a time in a worker; here they may all open at once.
    pool = ConnectionPool(PoolSettings(max_connections=max(counts) + 1, local_batch=20, remote_batch=50))
    # Warm the code paths (imports, first connection) so they are not counted per connection.
    await pool.call_tool(ConnectionKey.for_owner(1, config, "warm"), config, "echo", {"message": "x"})
    gc.collect()
    base_worker = rss_mb(os.getpid())
    base_rss, base_pss = _children_memory()
    rows, opened = [], 0
    for count in counts:
        keys = [ConnectionKey.for_owner(1, config, f"user:{i}") for i in range(opened, count)]
        outcomes = await asyncio.gather(*(pool.call_tool(key, config, "echo", {"message": "x"}) for key in keys))
        failed = [o.failure.message for o in outcomes if o.status != "succeeded" and o.failure]
        if failed:
            raise RuntimeError(f"{len(failed)} connections failed: {failed[:3]}")
        opened = count
        await asyncio.sleep(1.0)  # idle: let buffers settle
        gc.collect()
        worker = rss_mb(os.getpid()) - base_worker
        child_rss, child_pss = _children_memory()
        rows.append(
            {
                "connections": count,
                "worker_mb_per_connection": round(worker / count, 3),
                "child_rss_mb_per_connection": round((child_rss - base_rss) / count, 3) if config.is_local else 0.0,
                "child_pss_mb_per_connection": round((child_pss - base_pss) / count, 3) if config.is_local else 0.0,
            }
        )
    await pool.close_all()
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--transport", choices=["stdio", "http"], required=True)
    parser.add_argument("--counts", default="10,100")
    parser.add_argument("--url", default="")
    args = parser.parse_args(argv)
    counts = sorted(int(c) for c in args.counts.split(","))
    if args.transport == "stdio":
        config = ServerConfig(
            name="echo-stdio",
            transport="stdio",
            command=sys.executable,
            args=("-m", "sessions.mcp.demo_server"),
            cwd=str(ROOT),
        )
    else:
        config = ServerConfig(name="echo-http", transport="http", url=args.url)
    json.dump(asyncio.run(measure(config, counts)), sys.stdout)


if __name__ == "__main__":
    main()
