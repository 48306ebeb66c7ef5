"""A team admin's stdio server tries to get out: the portal's files, its processes, other servers,
the network; and a team admin tries to register what only the operator may (docs/security.md,
"stdio servers"). Every server here is built as the worker builds it (Server.to_config), so the
operator's settings decide, and runs in bubblewrap unless a test turns the sandbox off."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from django.conf import settings

from servers.models import Server
from sessions.mcp import sandbox as sandbox_module
from sessions.mcp.config import ConnectionKey, ServerConfig
from sessions.mcp.pool import ConnectionPool
from sessions.mcp.processes import become_subreaper, group_members, stop_process_group
from tests.conftest import DEMO_ARGS, EVERYTHING, ROOT
from tests.helpers import logged_in, probe_failure
from tests.test_server_registry import stdio_form

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed: `make test`")

ESCAPE_ARGS = ["-m", "tests.servers.escape_server"]
# What a sandboxed server's environment may hold: the basics, and its home inside the sandbox.
BASICS = {"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE", "PWD"}


@pytest.fixture(autouse=True)
def _probe_again():
    # A test that breaks bwrap must not leave its verdict to the next one.
    sandbox_module._probed.clear()
    yield
    sandbox_module._probed.clear()


def escape_server(alice, **fields) -> Server:
    values = {
        "team": alice.memberships.get().team,
        "name": "escape",
        "transport": "stdio",
        "command": sys.executable,
        "args": ESCAPE_ARGS,
        "cwd": str(ROOT),
        "protocol": "legacy",
        "created_by": alice,
        **fields,
    }
    return Server.objects.create(**values)


def attempt(pool: ConnectionPool, config: ServerConfig, owner: str = "user:1", **arguments) -> dict:
    key = ConnectionKey.for_owner(1, config, owner)
    outcome = pool.run(pool.call_tool(key, config, "attempt", arguments), timeout=60)
    assert outcome.status == "succeeded", outcome.failure
    return json.loads(outcome.result["content"][0]["text"])


# -- the portal's files and processes -------------------------------------------------------


@pytest.mark.django_db
def test_it_cannot_read_the_database_or_the_keys(alice, pool):
    config = escape_server(alice).to_config()
    # Something of the operator's is there in either mode (the distributed mode takes its keys from
    # the environment; a fresh clone running only that mode has no key files).
    (Path(settings.VAR_DIR) / "operator-only").write_text("not for servers")
    var_files = [path for path in Path(settings.VAR_DIR).iterdir() if path.is_file()]
    if settings.EMBEDDED:
        assert {"secret_key", "encryption_keys"} <= {path.name for path in var_files}
    database = Path(settings.DATABASES["default"]["NAME"])
    for path in [*var_files, database, database.with_name(database.name + "-wal")]:
        outcome = attempt(pool, config, action="read", path=str(path))
        assert outcome["ok"] is False and "FileNotFoundError" in outcome["error"], path
    assert attempt(pool, config, action="listdir", path=str(settings.VAR_DIR))["ok"] is False
    # The portal's directory holds only what the operator bound in it: no var/, no .git.
    shown = attempt(pool, config, action="listdir", path=str(ROOT))["detail"]
    assert "var" not in shown and ".git" not in shown and "portal" not in shown
    assert "sessions" in shown and "tests" in shown


@pytest.mark.django_db
def test_it_cannot_read_the_workers_environment(alice, pool, monkeypatch):
    monkeypatch.setenv("DJANGO_SECRET_KEY", "worker-only-secret")
    config = escape_server(alice, env={"SERVER_SETTING": "1"}).to_config()
    worker = os.getpid()
    outcome = attempt(pool, config, action="read", path=f"/proc/{worker}/environ")
    assert outcome["ok"] is False and "FileNotFoundError" in outcome["error"]
    me = attempt(pool, config, action="whoami")["detail"]
    # Its PID 1 is the sandbox's own, started with the server's environment and nothing more.
    assert set(me["pid1_environ"]) - {"SERVER_SETTING"} <= BASICS, me["pid1_environ"]
    assert set(me["environ"]) - {"SERVER_SETTING"} <= BASICS, me["environ"]
    assert me["pid"] < 10  # a PID namespace of its own
    outcome = attempt(pool, config, action="read", path="/proc/1/environ")
    assert "worker-only-secret" not in outcome.get("detail", "")


@pytest.mark.django_db
def test_it_cannot_signal_or_trace_the_worker(alice, pool):
    config = escape_server(alice).to_config()
    worker = os.getpid()
    outcome = attempt(pool, config, action="signal", pid=worker)
    assert outcome["ok"] is False and "ProcessLookupError" in outcome["error"]
    outcome = attempt(pool, config, action="ptrace", pid=worker)
    assert outcome["ok"] is False and outcome["error"] == os.strerror(3)  # ESRCH: no such process
    assert attempt(pool, config, action="listdir", path="/proc")["detail"].count(str(worker)) == 0


@pytest.mark.django_db
def test_it_cannot_see_another_servers_tmp_or_home(alice, pool):
    config = escape_server(alice).to_config()
    for where in ("/tmp", "/home/mcp"):
        written = attempt(pool, config, owner="user:1", action="write", path=f"{where}/left-by-one", text="x")
        assert written["ok"] is True
        assert "left-by-one" in attempt(pool, config, owner="user:1", action="listdir", path=where)["detail"]
        assert "left-by-one" not in attempt(pool, config, owner="user:2", action="listdir", path=where)["detail"]
    # And nothing of it reached the host's /tmp.
    assert not Path("/tmp/left-by-one").exists()


@pytest.mark.django_db
def test_the_system_is_read_only_and_etc_holds_no_secrets(alice, pool):
    config = escape_server(alice).to_config()
    outcome = attempt(pool, config, action="write", path="/usr/lib/planted", text="x")
    assert outcome["ok"] is False and "Read-only file system" in outcome["error"]
    assert attempt(pool, config, action="read", path="/etc/shadow")["ok"] is False
    assert attempt(pool, config, action="read", path="/etc/passwd")["ok"] is True


# -- the network ------------------------------------------------------------------------------


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback TCP listener on the host that accepts whoever comes."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            try:
                conn, _ = server.accept()
                conn.close()
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stopping.set()
    thread.join(2)
    server.close()


@pytest.mark.django_db
def test_with_network_off_it_cannot_reach_the_hosts_loopback(alice, pool, listener):
    config = escape_server(alice, network=False).to_config()
    outcome = attempt(pool, config, action="connect", host="127.0.0.1", port=listener)
    assert outcome["ok"] is False and "ConnectionRefusedError" in outcome["error"]


@pytest.mark.django_db
def test_with_network_on_it_can(alice, pool, listener):
    config = escape_server(alice, network=True).to_config()
    assert attempt(pool, config, action="connect", host="127.0.0.1", port=listener)["ok"] is True


@pytest.mark.django_db
def test_turning_the_network_off_gives_a_new_session(alice):
    server = escape_server(alice)
    on = server.to_config().fingerprint()
    server.network = False
    assert server.to_config().fingerprint() != on


# -- legitimate servers still work -------------------------------------------------------------


@pytest.mark.django_db
def test_the_demo_server_works_in_the_sandbox(demo_server, pool):
    config = demo_server.to_config()
    assert config.sandbox is not None
    key = ConnectionKey.for_owner(demo_server.pk, config, "user:1")
    outcome = pool.run(pool.call_tool(key, config, "echo", {"message": "in the box"}), timeout=60)
    assert outcome.status == "succeeded", outcome.failure
    assert "in the box" in json.dumps(outcome.result)


NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None or not EVERYTHING.exists(), reason="server-everything: run `make test-servers`")
@pytest.mark.django_db
def test_server_everything_runs_on_node_in_the_sandbox(alice, pool):
    server = escape_server(alice, name="everything", command=NODE, args=[str(EVERYTHING), "stdio"], protocol="auto")
    config = server.to_config()
    info = pool.run(pool.probe(config), timeout=60)
    assert info["tool_count"] > 5


@pytest.mark.django_db
def test_an_installed_python_server_in_a_venv_of_its_own_runs(alice, pool, settings, tmp_path):
    """The shape of a server from PyPI: a virtualenv with a console script, bound by the operator."""
    venv = tmp_path / "venv"
    anyio.run(anyio.run_process, [sys.executable, "-m", "venv", "--without-pip", str(venv)])
    site = next((venv / "lib").glob("python*/site-packages"))
    # The portal's own packages stand in for what pip would have installed (there is no index here).
    (site / "portal-packages.pth").write_text(
        "\n".join(path for path in sys.path if path.endswith("site-packages")) + "\n" + str(ROOT) + "\n"
    )
    script = venv / "bin" / "demo-mcp-server"
    script.write_text(f"#!{venv}/bin/python\nfrom sessions.mcp.demo_server import main\nmain()\n")
    script.chmod(0o755)
    settings.PORTAL_STDIO_COMMANDS = [*settings.PORTAL_STDIO_COMMANDS, str(script)]
    settings.PORTAL_STDIO_BIND_PATHS = [*settings.PORTAL_STDIO_BIND_PATHS, str(venv)]
    config = escape_server(alice, name="pypi", command=str(script), args=[], cwd="", protocol="auto").to_config()
    info = pool.run(pool.probe(config), timeout=60)
    assert info["tool_count"] > 3


# -- no sandbox, no start --------------------------------------------------------------------


@pytest.mark.django_db
def test_without_bubblewrap_no_stdio_server_starts_and_it_says_why(alice, pool, settings):
    settings.PORTAL_STDIO_BWRAP = "/nonexistent/bwrap"
    failure = probe_failure(pool, escape_server(alice).to_config())
    assert failure.kind == "sandbox_unavailable"
    assert "/nonexistent/bwrap" in failure.message and "apt-get install bubblewrap" in failure.message
    assert "PORTAL_STDIO_SANDBOX=off" in failure.message


@pytest.mark.django_db
def test_a_bubblewrap_that_cannot_make_a_sandbox_is_not_used(alice, pool, settings, tmp_path):
    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    broken.chmod(0o755)
    settings.PORTAL_STDIO_BWRAP = str(broken)
    failure = probe_failure(pool, escape_server(alice).to_config())
    assert failure.kind == "sandbox_unavailable" and "No permissions to create new namespace" in failure.message


@pytest.mark.django_db
def test_with_the_sandbox_off_it_starts_and_the_servers_page_says_so(alice, bob, pool, settings):
    settings.PORTAL_STDIO_BWRAP = "/nonexistent/bwrap"
    settings.PORTAL_STDIO_SANDBOX = "off"
    config = escape_server(alice).to_config()
    assert config.sandbox is None
    # What "off" means: the server reads what the portal reads.
    assert attempt(pool, config, action="listdir", path=str(settings.VAR_DIR))["ok"] is True
    assert 'id="sandbox-off"' in logged_in(alice).get("/servers/").content.decode()
    assert 'id="sandbox-off"' not in logged_in(bob).get("/servers/").content.decode()  # members: not theirs to fix
    settings.PORTAL_STDIO_SANDBOX = "on"
    assert 'id="sandbox-off"' not in logged_in(alice).get("/servers/").content.decode()


# -- the sandbox is still stopped as a process group ------------------------------------------


def test_the_stop_escalation_reaches_the_server_inside_bwrap():
    become_subreaper()
    policy = sandbox_module.SandboxPolicy(binds=tuple(sandbox_module.Bind(p) for p in settings.PORTAL_STDIO_BIND_PATHS))
    ready = "import signal, sys, time; "
    cases = {
        "stdin": ready + "print('ready', flush=True); sys.stdin.read()",
        "SIGINT": ready + "print('ready', flush=True); time.sleep(60)",
        "SIGTERM": ready + "signal.signal(signal.SIGINT, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)",
        "SIGKILL": ready + "[signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]; "
        "print('ready', flush=True); time.sleep(60)",
    }

    async def stop(code: str) -> tuple[str, int]:
        argv = policy.argv([sys.executable, "-c", code])
        process = await anyio.open_process(argv, start_new_session=True)
        assert process.stdout is not None
        await process.stdout.receive()
        return await stop_process_group(process), process.pid

    for expected, code in cases.items():
        step, group = anyio.run(stop, code)
        assert step == expected
        assert group_members(group) == []  # bwrap, its init and the server: all gone, none a zombie


# -- what a team admin may register -------------------------------------------------------------


@pytest.mark.django_db
def test_a_team_admin_cannot_register_a_shell(alice):
    form = stdio_form(alice.memberships.get().team, command="/bin/sh", args="-c\ncat var/secret_key")
    response = logged_in(alice).post("/servers/add/", form)
    assert response.status_code == 200 and not Server.objects.exists()
    error = response.context["form"].errors["command"][0]
    assert "/bin/sh -c 'cat var/secret_key'" in error and "is not allowed" in error
    assert "npx -y {package} ..." in error  # the message says what is allowed


@pytest.mark.django_db
def test_a_team_admin_cannot_fill_a_template_with_an_option(alice):
    team = alice.memberships.get().team
    form = stdio_form(team, command="npx", args="-y\n--call=sh -c id")
    response = logged_in(alice).post("/servers/add/", form)
    assert response.status_code == 200 and not Server.objects.exists()


@pytest.mark.django_db
def test_a_team_admin_can_register_an_allowed_template(alice):
    form = stdio_form(alice.memberships.get().team, command="npx", args="-y\n@modelcontextprotocol/server-memory")
    assert logged_in(alice).post("/servers/add/", form).status_code == 302
    server = Server.objects.get()
    assert server.command_set_by_operator is False and server.network is False  # the box was left unticked
    page = logged_in(alice).get(f"/servers/{server.pk}/").content.decode()
    assert "Off: no network in the sandbox" in page


@pytest.mark.django_db
def test_an_operator_registers_any_command(make_user):
    root = make_user("root", role="admin", is_superuser=True, is_staff=True)
    form = stdio_form(root.memberships.get().team, command="/bin/sh", args="-c\nexec python3 -m my_server")
    assert logged_in(root).post("/servers/add/", form).status_code == 302
    server = Server.objects.get()
    assert server.command_set_by_operator is True and server.to_config().allowed_commands is None


@pytest.mark.django_db
def test_a_team_admin_edits_an_operators_server_but_not_its_command(alice, make_user):
    root = make_user("root", role="admin", is_superuser=True)
    form = stdio_form(alice.memberships.get().team, command="/bin/sh", args="-c\nexec my-server")
    logged_in(root).post("/servers/add/", form)
    server = Server.objects.get()
    assert logged_in(alice).post(f"/servers/{server.pk}/edit/", {**form, "description": "new"}).status_code == 302
    server.refresh_from_db()
    assert server.description == "new" and server.command_set_by_operator is True
    response = logged_in(alice).post(f"/servers/{server.pk}/edit/", {**form, "args": "-c\nexec other"})
    assert response.status_code == 200 and "is not allowed" in response.context["form"].errors["command"][0]


@pytest.mark.django_db
def test_the_operator_may_let_team_admins_register_any_command(alice, settings):
    settings.PORTAL_STDIO_ANY_COMMAND_FOR_ADMINS = True
    form = stdio_form(alice.memberships.get().team, command="/bin/sh", args="-c\nexec my-server")
    assert logged_in(alice).post("/servers/add/", form).status_code == 302
    assert Server.objects.get().to_config().allowed_commands is None


@pytest.mark.django_db
def test_an_empty_list_allows_team_admins_nothing(alice, settings):
    settings.PORTAL_STDIO_COMMANDS = []
    response = logged_in(alice).post("/servers/add/", stdio_form(alice.memberships.get().team))
    assert "lets team admins start no stdio commands" in response.context["form"].errors["command"][0]


@pytest.mark.django_db
def test_an_import_by_a_team_admin_is_held_to_the_list(alice):
    from servers.actions import plan_import

    text = json.dumps({"mcpServers": {"sh": {"command": "/bin/sh", "args": ["-c", "id"]}}})
    (entry,) = plan_import(alice.memberships.get().team, text).entries
    assert entry.status == "error" and "is not allowed" in entry.message
    (entry,) = plan_import(alice.memberships.get().team, text, operator=True).entries
    assert entry.status == "new" and entry.fields["command_set_by_operator"] is True


@pytest.mark.django_db(transaction=True)
def test_a_team_admins_free_form_command_is_refused_at_start(alice):
    from sessions import worker

    # Registered before the list applied to it (or written to the database by other means).
    server = escape_server(
        alice, command="/bin/sh", args=["-c", f"exec {sys.executable} -m tests.servers.escape_server"]
    )
    worker.execute_test_connection(server.pk, alice.pk)
    server.refresh_from_db()
    assert server.last_test["ok"] is False and server.last_test["kind"] == "command_not_allowed"
    Server.objects.filter(pk=server.pk).update(command_set_by_operator=True)
    worker.execute_test_connection(server.pk, alice.pk)
    server.refresh_from_db()
    assert server.last_test["ok"] is True, server.last_test


# -- env names that hijack how a program starts ----------------------------------------------

HIJACKS = ["LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONINSPECT"]
HIJACKS += ["PYTHONWARNINGS", "NODE_OPTIONS", "BASH_ENV", "ENV", "PATH"]


@pytest.mark.django_db
@pytest.mark.parametrize("name", HIJACKS)
def test_the_form_refuses_env_that_hijacks_startup(alice, name):
    response = logged_in(alice).post("/servers/add/", stdio_form(alice.memberships.get().team, env=f"{name}=/tmp/x"))
    assert response.status_code == 200 and not Server.objects.exists()
    assert f"A server may not set {name}" in response.context["form"].errors["env"][0]


@pytest.mark.django_db
def test_harmless_python_and_node_settings_are_kept(alice):
    env = "PYTHONUNBUFFERED=1\nPYTHONIOENCODING=utf-8\nNODE_ENV=production"
    assert logged_in(alice).post("/servers/add/", stdio_form(alice.memberships.get().team, env=env)).status_code == 302


@pytest.mark.django_db
def test_an_import_with_a_hijacking_env_is_refused(alice, make_user):
    from servers.actions import plan_import

    text = json.dumps({"mcpServers": {"m": {"command": "npx", "args": ["-y", "pkg"], "env": {"LD_PRELOAD": "/x.so"}}}})
    root = make_user("root", role="admin", is_superuser=True)
    for operator in (False, True):  # not even an operator's: wrap the server in a script instead
        (entry,) = plan_import(root.memberships.get().team, text, operator=operator).entries
        assert entry.status == "error" and "may not set LD_PRELOAD" in entry.message


@pytest.mark.django_db(transaction=True)
def test_a_hijacking_env_is_refused_at_start(alice):
    from sessions import worker

    server = escape_server(alice, env={"PYTHONSTARTUP": "/tmp/x.py", "NODE_OPTIONS": "--require /tmp/x.js"})
    worker.execute_test_connection(server.pk, alice.pk)
    server.refresh_from_db()
    assert server.last_test["ok"] is False and server.last_test["kind"] == "env_not_allowed"
    assert "NODE_OPTIONS, PYTHONSTARTUP" in server.last_test["message"]


def test_the_demo_arguments_are_what_the_default_list_allows():
    from sessions.mcp.commands import command_allowed

    assert command_allowed(sys.executable, DEMO_ARGS, settings.PORTAL_STDIO_COMMANDS)
    assert command_allowed(sys.executable, ESCAPE_ARGS, settings.PORTAL_STDIO_COMMANDS)
    assert not command_allowed(sys.executable, ["-c", "print(1)"], settings.PORTAL_STDIO_COMMANDS)
