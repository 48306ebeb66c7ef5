"""stdio servers: the child's minimal environment and the operator's list of commands,
checked at registration (form and import) and again at every start.

The command templates, who may register what, the refused env names and the sandbox itself are
attacked in tests/security/test_stdio_sandbox.py."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from servers.models import Server
from sessions.mcp.config import ServerConfig
from sessions.mcp.failure import ConnectionFailed
from tests.conftest import ROOT
from tests.helpers import logged_in
from tests.test_server_registry import stdio_form

FAULT_ARGS = ("-m", "tests.servers.fault_server")
# What the SDK's default environment passes on (POSIX), and what Python itself may add (PEP 538).
MINIMAL = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE"}


def fault_config(**overrides) -> ServerConfig:
    fields = {"name": "faulty", "transport": "stdio", "command": sys.executable, "args": FAULT_ARGS}
    return ServerConfig(**{**fields, "cwd": str(ROOT), "protocol": "legacy", **overrides})


def test_the_child_gets_a_minimal_environment_and_its_own_env(pool, monkeypatch):
    monkeypatch.setenv("DJANGO_SECRET_KEY", "not-for-children")
    monkeypatch.setenv("PORTAL_TEST_TOKEN", "not-for-children-either")
    config = fault_config(env={"SERVER_SETTING": "1"})
    outcome = pool.run(pool.call_tool(config_key(config), config, "environment", {}), timeout=60)
    assert outcome.status == "succeeded", outcome.failure
    names = set(json.loads(outcome.result["content"][0]["text"]))
    assert "SERVER_SETTING" in names
    assert names - {"SERVER_SETTING"} <= MINIMAL, names
    assert not {"DJANGO_SECRET_KEY", "PORTAL_TEST_TOKEN", "DATABASE_URL", "REDIS_URL"} & names


def config_key(config: ServerConfig):
    from sessions.mcp.config import ConnectionKey

    return ConnectionKey.for_owner(1, config, "user:1")


def test_a_command_outside_the_allowlist_is_refused_when_it_would_start(pool):
    with pytest.raises(ConnectionFailed) as caught:
        pool.run(pool.probe(fault_config(allowed_commands=("/bin/true",))), timeout=60)
    failure = caught.value.failure
    assert failure.kind == "command_not_allowed"
    assert sys.executable in failure.message and "/bin/true" in failure.message
    # Listed (as a path; symlinks are followed on both sides), it starts.
    info = pool.run(pool.probe(fault_config(allowed_commands=(sys.executable,))), timeout=60)
    assert info["tool_count"] > 0


def test_the_server_env_cannot_swap_an_allowed_name_for_another_program(pool, tmp_path: Path):
    fake = tmp_path / "true"
    fake.write_text(f"#!/bin/sh\nexec {sys.executable} -m tests.servers.fault_server\n")
    fake.chmod(0o755)
    # "true" is allowed as the operator's PATH finds it; the server's own PATH would point elsewhere,
    # and a server may not set PATH at all: refused before anything starts.
    config = fault_config(command="true", args=(), env={"PATH": str(tmp_path)}, allowed_commands=("true",))
    with pytest.raises(ConnectionFailed) as caught:
        pool.run(pool.probe(config), timeout=60)
    assert caught.value.failure.kind == "env_not_allowed" and "PATH" in caught.value.failure.message


@pytest.mark.django_db
def test_the_form_refuses_a_command_outside_the_allowlist(alice, settings):
    team = alice.memberships.get().team
    settings.PORTAL_STDIO_COMMANDS = ["/bin/true"]
    response = logged_in(alice).post("/servers/add/", stdio_form(team))
    assert response.status_code == 200
    page = response.content.decode()
    assert "is not allowed. Team admins may start only these commands" in page and "/bin/true." in page
    assert not Server.objects.exists()
    settings.PORTAL_STDIO_COMMANDS = ["/bin/true", sys.executable]
    assert logged_in(alice).post("/servers/add/", stdio_form(team)).status_code == 302


@pytest.mark.django_db
def test_an_import_with_a_command_outside_the_allowlist_is_refused(alice, settings):
    from servers.actions import plan_import

    settings.PORTAL_STDIO_COMMANDS = ["/bin/true"]
    text = json.dumps({"mcpServers": {"py": {"command": sys.executable, "args": ["-V"]}}})
    (entry,) = plan_import(alice.memberships.get().team, text).entries
    assert entry.status == "error" and "Team admins may start only these commands" in entry.message


@pytest.mark.django_db(transaction=True)
def test_a_server_registered_before_the_allowlist_is_refused_at_its_next_start(alice, settings):
    from sessions import worker

    server = Server.objects.create(
        team=alice.memberships.get().team,
        name="faulty",
        transport="stdio",
        command=sys.executable,
        args=list(FAULT_ARGS),
        cwd=str(ROOT),
        protocol="legacy",
        created_by=alice,
    )
    settings.PORTAL_STDIO_COMMANDS = ["/bin/true"]
    worker.execute_test_connection(server.pk, alice.pk)
    server.refresh_from_db()
    assert server.last_test["ok"] is False and server.last_test["kind"] == "command_not_allowed"
    assert "not among the commands this portal allows" in server.last_test["message"]


def test_a_bare_name_is_allowed_when_the_portals_path_finds_the_listed_file(pool, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    config = fault_config(command=os.path.basename(sys.executable), allowed_commands=(sys.executable,))
    info = pool.run(pool.probe(config), timeout=60)
    assert info["server_name"] == "fault-server"
