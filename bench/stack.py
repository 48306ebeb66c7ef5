"""The processes a bench run measures: demo servers, and the portal in either mode."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# Every pool log line for a new connection contains this (sessions/mcp/pool.py).
OPENED_MARKER = "MCP connection opened"

# The bench's own resources in the distributed mode, apart from the test suites'.
BENCH_DATABASE = os.environ.get("BENCH_DATABASE", "portal_bench")
BENCH_PG = os.environ.get("BENCH_PG", "postgres://postgres@127.0.0.1:5432")
BENCH_REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/8")
BENCH_QUEUE = os.environ.get("BENCH_QUEUE", "bench")
BENCH_ENCRYPTION_KEYS = "bench:" + base64.b64encode(b"bench-only-key-not-in-production").decode()
# Two worker processes on this two-core machine, 16 threads each, as the issue sets.
DISTRIBUTED_WORKERS = 2
WORKER_THREADS = int(os.environ.get("BENCH_WORKER_THREADS", "16"))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, process: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on {port} within {timeout} s")


def stop(process: subprocess.Popen, timeout: float = 15.0) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "PORTAL_VAR_DIR")}
    env.update(
        DJANGO_SETTINGS_MODULE="bench.settings",
        PYTHONPATH=str(ROOT),
        LOG_LEVEL="INFO",
        # 200 users × 2 servers must fit in one worker's pool, or eviction would reconnect warm users.
        MCP_POOL_MAX_CONNECTIONS="2000",
        # The demo servers listen on 127.0.0.1, which the distributed mode refuses by default.
        PORTAL_ALLOW_PRIVATE_NETWORK="1",
        # The bench's users call as fast as the portal answers; the per-user limit would measure itself.
        PORTAL_TOOL_CALLS_PER_MINUTE="0",
        # Nor may the endpoint's per-token limit be what a series measures; raised, not turned off,
        # so that every request still pays for counting, as in production.
        PORTAL_ENDPOINT_REQUESTS_PER_MINUTE="1000000",
    )
    return env


class DemoHttpServer:
    """The demo server over Streamable HTTP, one process for the whole run, on one port.

    On a machine shared with other work a process can die under the bench; `ensure_alive`
    starts it again on the same port (so registered URLs stay right) and counts restarts.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.log = tempfile.NamedTemporaryFile(prefix="bench-demo-http-", suffix=".log", delete=False)  # noqa: SIM115
        self.restarts: list[str] = []
        self._start()

    def _start(self) -> None:
        self.process = subprocess.Popen(
            [PYTHON, "-m", "sessions.mcp.demo_server", "http", "--port", str(self.port)],
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port, self.process)

    def ensure_alive(self) -> None:
        if self.process.poll() is None:
            return
        self.restarts.append(f"exited with {self.process.returncode}")
        self._start()

    def close(self) -> None:
        stop(self.process)
        self.log.close()
        os.unlink(self.log.name)


@dataclass
class Portal:
    """A running portal: daphne (with worker threads in the embedded mode) and any worker processes."""

    mode: str
    base_url: str
    web: subprocess.Popen
    workers: list[subprocess.Popen]
    logs: list[Path]
    fixtures: dict
    workdir: tempfile.TemporaryDirectory
    _handles: list[IO] = field(default_factory=list)
    # How a worker process is started, so that one can be started again after it was killed.
    worker_argv: list[list[str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def restart_worker(self, index: int) -> subprocess.Popen:
        """Start worker `index` again (after it died), logging to the same file."""
        log = self.logs[1 + index]
        handle = open(log, "a")  # noqa: SIM115 - closed in close()
        self._handles.append(handle)
        process = subprocess.Popen(
            self.worker_argv[index], cwd=ROOT, env=self.env, stdout=handle, stderr=subprocess.STDOUT
        )
        self.workers[index] = process
        return process

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self.workers] if self.workers else [self.web.pid]

    @property
    def pids(self) -> list[int]:
        return [self.web.pid, *(p.pid for p in self.workers)]

    def connections_opened(self) -> int:
        """How many MCP connections the pools have opened so far, from their log lines."""
        total = 0
        for path in self.logs:
            with open(path, errors="replace") as handle:
                total += sum(1 for line in handle if OPENED_MARKER in line)
        return total

    def owners_connected(self, server_name: str) -> list[set[str]]:
        """For each worker process, the owners ("user:ID") it has opened a connection to `server_name` for."""
        worker_logs = self.logs[1:] if self.workers else self.logs[:1]
        marker = f"{OPENED_MARKER}: {server_name} ("
        found = []
        for path in worker_logs:
            with open(path, errors="replace") as handle:
                found.append({line.split(" for ", 1)[1].split()[0] for line in handle if marker in line})
        return found

    def close(self) -> None:
        for process in [*self.workers, self.web]:
            stop(process)
        for handle in self._handles:
            handle.close()
        self.workdir.cleanup()


def _fixtures(env: dict[str, str], users: int, http_url: str, fault_server: bool = False) -> dict:
    argv = [PYTHON, "-m", "bench.fixtures", "--users", str(users), "--http-url", http_url]
    out = subprocess.run(
        argv + (["--fault-server"] if fault_server else []),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"bench fixtures failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout)


def _reset_distributed_stores() -> None:
    """A fresh bench database and an empty Redis db, so every run starts alike."""
    import psycopg
    import redis

    with psycopg.connect(f"{BENCH_PG}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{BENCH_DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{BENCH_DATABASE}"')
    redis.Redis.from_url(BENCH_REDIS).flushdb()


def start_portal(
    mode: str,
    users: int,
    http_url: str,
    stores: tuple[str, str] | None = None,
    extra_env: dict[str, str] | None = None,
    fault_server: bool = False,
) -> Portal:
    """The portal in `mode`. `stores` is (DATABASE_URL, REDIS_URL) of the caller's own, already
    empty (bench/services.py); without it the distributed mode resets the bench's database and Redis db."""
    workdir = tempfile.TemporaryDirectory(prefix=f"portal-bench-{mode}-")
    env = base_env()
    env["PORTAL_VAR_DIR"] = workdir.name
    env.update(extra_env or {})
    if mode == "distributed":
        if stores is None:
            _reset_distributed_stores()
        database_url, redis_url = stores or (f"{BENCH_PG}/{BENCH_DATABASE}", BENCH_REDIS)
        env.update(
            DATABASE_URL=database_url,
            REDIS_URL=redis_url,
            CELERY_QUEUE=BENCH_QUEUE,
            CHANNELS_PREFIX=BENCH_QUEUE,
            DJANGO_SECRET_KEY="bench-only-secret-key-0123456789-0123456789",
            PORTAL_SECURE_COOKIES="0",
        )
        # The distributed mode will not start without a key; the bench's secrets are throwaway.
        env.setdefault("PORTAL_ENCRYPTION_KEYS", BENCH_ENCRYPTION_KEYS)
        # The distributed mode allows team admins no stdio command until the operator lists some:
        # the bench, as the operator, lists what the embedded mode allows (the demo server among them).
        # Imported only here: the portal package brings Celery's app into the bench's process.
        from portal.stdio_defaults import default_bind_paths, default_commands

        env.setdefault("PORTAL_STDIO_COMMANDS", ",".join(default_commands(ROOT, embedded=True)))
        env.setdefault("PORTAL_STDIO_BIND_PATHS", ",".join(default_bind_paths(ROOT, embedded=True)))
    fixtures = _fixtures(env, users, http_url, fault_server)
    port = free_port()
    handles: list[IO] = []
    logs: list[Path] = []

    def spawn(name: str, argv: list[str]) -> subprocess.Popen:
        log = Path(workdir.name) / f"{name}.log"
        handle = open(log, "w")  # noqa: SIM115 - closed in Portal.close
        handles.append(handle)
        logs.append(log)
        return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)

    web = spawn("web", [PYTHON, "manage.py", "runportal", "--port", str(port)])
    workers = []
    worker_argv: list[list[str]] = []
    if mode == "distributed":
        for index in range(DISTRIBUTED_WORKERS):
            worker_argv.append(
                [
                    PYTHON,
                    "-m",
                    "celery",
                    "-A",
                    "portal",
                    "worker",
                    "-P",
                    "threads",
                    "-c",
                    str(WORKER_THREADS),
                    "--without-mingle",
                    "--without-gossip",
                    "-l",
                    "INFO",
                    "-n",
                    f"bench{index}@%h",
                ]
            )
            workers.append(spawn(f"worker{index}", worker_argv[-1]))
    portal = Portal(mode, f"http://127.0.0.1:{port}", web, workers, logs, fixtures, workdir, handles, worker_argv, env)
    try:
        wait_for_port(port, web)
        if workers:
            _wait_for_workers(portal)
    except BaseException:
        portal.close()
        raise
    return portal


def _wait_for_workers(portal: Portal, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready = 0
        for process, log in zip(portal.workers, portal.logs[1:], strict=True):
            if process.poll() is not None:
                raise RuntimeError(f"a bench worker exited with {process.returncode}: see {log}")
            if "ready." in log.read_text(errors="replace"):
                ready += 1
        if ready == len(portal.workers):
            return
        time.sleep(0.2)
    raise TimeoutError("the bench's Celery workers did not start")


# -- memory, from /proc ------------------------------------------------------------------


def _status_kb(pid: int, field_name: str) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time the processes have used so far (their own, not their children's)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmRSS") / 1024


def peak_rss_mb(pid: int) -> float:
    return _status_kb(pid, "VmHWM") / 1024


def reset_peak_rss(pid: int) -> bool:
    """Start a new peak: writing 5 to clear_refs resets VmHWM to the current RSS (Linux ≥ 4.0)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as handle:
            handle.write("5")
        return True
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """Every descendant of `pid`."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
