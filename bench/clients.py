"""The 1,000-client series: many MCP clients held open through `/mcp/<server>/` for a window.

"Held" means: every client opens its session (an `mcp.Client` over Streamable HTTP, 2026-07-28
era, with a personal access token of its own person), makes one warm-up call, keeps the session
for the whole window, and calls `echo` in a closed loop with a think time between calls (uniform
in [0, 2 × think], mean `think`); the first call of the window comes after such a pause too, so
the calls do not start in one burst. A client offers at most 1 ÷ think calls/s, so the window's
offered load is at most clients ÷ think: with 1,000 clients and 5 s, 200 calls/s. A portal slower
than that answers later (the loop is closed: latency grows until the load fits), and the p99 says
by how much; a call that takes over CALL_TIMEOUT is an error.

The clients run in a process of their own (`python -m bench.clients`, started by `run`): one
Python process is at most one core (its GIL), so on two cores the bench's clients cannot take both
from the portal, and the process's own CPU is measured and reported beside the portal's. The
parent measures the portal's CPU between "go" and the child's end-of-window line, so the figure
covers the window only.

Protocol on the child's stdin/stdout (one JSON object a line): the child connects and warms every
client, then prints {"ready": …}; the parent answers "warm" (one more warm-up call each, then
"ready" again) or "go"; the child prints {"window": …} when the window ends, lets the calls in
flight finish and prints {"result": …}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

from bench.fixtures import HTTP_SERVER
from bench.stack import PYTHON, ROOT, Portal, cpu_seconds
from bench.stats import summary_ms

CALL_TIMEOUT = 60.0
# Sessions opened (and warmed) at once: a burst of new TCP connections must not overflow Daphne's
# listen backlog (Twisted's default, 50) — connecting is not what this series measures; holding is.
CONNECTS_AT_ONCE = 20


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to the hard one; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


def _process_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


async def _read_line() -> str:
    return (await asyncio.to_thread(sys.stdin.readline)).strip()


async def child(url: str, tokens: list[str], seconds: float, think: float) -> None:
    # Imported here: the parent (bench.run) never needs the SDK for this series.
    from bench.endpoint import echo, session

    errors: list[str] = []
    clients: list[Any] = []
    gate = asyncio.Semaphore(CONNECTS_AT_ONCE)
    stop = asyncio.Event()
    go = asyncio.Event()
    closing = asyncio.Event()
    samples: list[tuple[float, float]] = []  # (ended, seconds) of every call of the window
    window_errors: list[str] = []
    failing: set[str] = set()  # the clients with at least one failed call in the window

    async def warm(sdk: Any) -> None:
        try:
            async with asyncio.timeout(CALL_TIMEOUT):
                await echo(sdk, "warm")
        except Exception as exc:  # noqa: BLE001 - counted: a client whose warm-up fails is an error
            errors.append(f"warm-up: {type(exc).__name__}: {exc}"[:200])

    async def one(token: str, opened: asyncio.Future) -> None:
        # Connected and warmed a few at a time: a thousand first calls at once (each opening the
        # person's pooled connection) would queue past CALL_TIMEOUT on a portal that is not yet warm.
        async with gate:
            try:
                context = session(url, token, "2026-07-28")
                sdk = await context.__aenter__()
            except Exception as exc:  # noqa: BLE001 - a client that cannot connect is an error of the series
                opened.set_result(None)
                errors.append(f"connect: {type(exc).__name__}: {exc}"[:200])
                return
            await warm(sdk)
        try:
            opened.set_result(sdk)
            await go.wait()
            await asyncio.sleep(random.uniform(0, 2 * think))
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    async with asyncio.timeout(CALL_TIMEOUT):
                        await echo(sdk, "x")
                except Exception as exc:  # noqa: BLE001 - counted; the client goes on calling
                    window_errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    failing.add(token)
                else:
                    ended = time.perf_counter()
                    samples.append((ended, ended - started))
                if not stop.is_set():
                    try:
                        await asyncio.wait_for(stop.wait(), random.uniform(0, 2 * think))
                    except TimeoutError:
                        pass
            await closing.wait()
        finally:
            try:
                await context.__aexit__(None, None, None)
            except Exception:  # noqa: BLE001, S110 - closing after the window: not part of the measure
                pass

    opened = [asyncio.get_running_loop().create_future() for _ in tokens]
    began = time.perf_counter()
    tasks = [asyncio.create_task(one(token, future)) for token, future in zip(tokens, opened, strict=True)]
    clients = [sdk for sdk in await asyncio.gather(*opened) if sdk is not None]
    _say({"ready": len(clients), "connect_s": round(time.perf_counter() - began, 1), "errors": len(errors)})
    while (command := await _read_line()) == "warm":
        await asyncio.gather(*(warm(sdk) for sdk in clients))
        _say({"ready": len(clients), "errors": len(errors)})
    if command != "go":
        raise SystemExit(f"expected go, got {command!r}")
    cpu = _process_cpu()
    began = time.perf_counter()
    go.set()
    await asyncio.sleep(seconds)
    ended = time.perf_counter()
    cpu = _process_cpu() - cpu
    stop.set()
    in_window = [elapsed for at, elapsed in samples if at <= ended]
    errors_in_window = len(window_errors)
    _say({"window": round(ended - began, 3)})
    # The calls in flight at the window's end finish (their errors count too), then every session closes.
    closing.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    late_errors = window_errors[errors_in_window:]
    every_error = errors + window_errors
    _say(
        {
            "result": {
                "clients": len(tokens),
                "connected": len(clients),
                "elapsed": ended - began,
                "samples": in_window,
                "errors": len(every_error),
                "errors_after_window": len(late_errors),
                "clients_with_failed_calls": len(failing),
                "error_examples": sorted(set(every_error))[:5],
                "client_cpu_s": cpu,
            }
        }
    )


async def run(
    portal: Portal, url: str, tokens: list[str], seconds: float, think: float, log: Any = None
) -> dict[str, Any]:
    """Run the series in a child process against `url`; the portal's CPU and handshakes around the window."""
    say = log or (lambda _message: None)
    path = Path(portal.workdir.name) / "clients-tokens.json"
    path.write_text(json.dumps(tokens))
    argv = [PYTHON, "-m", "bench.clients", "--url", url, "--tokens", str(path)]
    argv += ["--seconds", str(seconds), "--think", str(think)]
    process = await asyncio.create_subprocess_exec(
        *argv, cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None
    )
    assert process.stdin and process.stdout

    async def receive(timeout: float) -> dict[str, Any]:
        line = await asyncio.wait_for(process.stdout.readline(), timeout)
        if not line:
            raise RuntimeError(f"the clients' process ended ({await process.wait()}) before answering")
        return json.loads(line)

    async def send(command: str) -> None:
        process.stdin.write(command.encode() + b"\n")
        await process.stdin.drain()

    try:
        ready = await receive(timeout=60 + len(tokens) * 2)
        say(f"{ready['ready']} of {len(tokens)} clients connected and warm in {ready.get('connect_s')} s")
        # A call of a person goes to the worker holding their session (sessions/affinity.py): once
        # every person has a connection somewhere, the window's calls are warm ones.
        owners = {f"user:{pk}" for pk in portal.fixtures["user_ids"][: len(tokens)]}
        for _ in range(5):
            connected = set().union(*portal.owners_connected(HTTP_SERVER))
            if owners <= connected:
                break
            await send("warm")
            ready = await receive(timeout=60 + len(tokens) * 2)
        opened = portal.connections_opened()
        cpu = cpu_seconds(portal.pids)
        await send("go")
        window = await receive(timeout=seconds + 60)
        cpu = cpu_seconds(portal.pids) - cpu
        handshakes = portal.connections_opened() - opened
        result = (await receive(timeout=CALL_TIMEOUT + 60))["result"]
        await asyncio.wait_for(process.wait(), 60)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        path.unlink(missing_ok=True)
    if result["errors"]:
        result["portal_log_examples"] = portal_log_examples(portal)
    samples = result.pop("samples")
    done = len(samples)
    elapsed = window["window"]
    return {
        **result,
        "seconds": seconds,
        "think_s": think,
        "calls": done,
        "calls_per_s": round(done / elapsed, 1) if elapsed else None,
        **{k: v for k, v in summary_ms(samples).items() if k in ("p50", "p95", "p99", "max")},
        "portal_cpu_ms_per_call": round(cpu * 1000 / done, 3) if done else None,
        "client_cpu_ms_per_call": round(result["client_cpu_s"] * 1000 / done, 3) if done else None,
        "client_cpu_share": round(result.pop("client_cpu_s") / elapsed, 3) if elapsed else None,
        "handshakes": handshakes,
    }


def portal_log_examples(portal: Portal, limit: int = 8) -> list[str]:
    """The portal's last distinct warnings and errors (a traceback as one), to say why calls failed."""
    seen: dict[str, None] = {}
    for path in portal.logs:
        lines = path.read_text(errors="replace").splitlines()
        for index, line in enumerate(lines):
            if line.startswith("Traceback"):
                block = [line]
                for following in lines[index + 1 : index + 60]:
                    block.append(following)
                    if not following.startswith(" "):
                        break
                line = "\n".join(block)
            elif not any(word in line for word in ("rror", "WARNING", "timed out", "refused")) or line.startswith(" "):
                continue
            seen.pop(line[:3000], None)
            seen[line[:3000]] = None
    return list(seen)[-limit:]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True)
    parser.add_argument("--tokens", required=True, help="a JSON file: one token per client")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--think", type=float, required=True)
    args = parser.parse_args(argv)
    raise_open_files_limit()
    tokens = json.loads(Path(args.tokens).read_text())
    os.unlink(args.tokens)
    asyncio.run(child(args.url, tokens, args.seconds, args.think))


if __name__ == "__main__":
    main()
