"""The sandbox policy → bwrap's argv (sessions/mcp/sandbox.py): pure, checked flag by flag.
What the sandbox then refuses a hostile server is in tests/security/test_stdio_sandbox.py."""

from __future__ import annotations

import pytest

from sessions.mcp.sandbox import ENV, HOME, Bind, SandboxPolicy


def pairs(argv: list[str], flag: str, arity: int = 2) -> list[tuple[str, ...]]:
    return [tuple(argv[i + 1 : i + 1 + arity]) for i, word in enumerate(argv) if word == flag]


def sandbox_part(argv: list[str]) -> list[str]:
    """bwrap's own arguments: before the `--` that starts the command."""
    return argv[: argv.index("--")]


def test_it_makes_new_namespaces_drops_capabilities_and_dies_with_its_parent():
    argv = sandbox_part(SandboxPolicy().argv(["/usr/bin/true"]))
    assert argv[:3] == [ENV, "--ignore-signal=INT,TERM", "bwrap"]
    for flag in ("--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"):
        assert flag in argv
    assert pairs(argv, "--cap-drop", 1) == [("ALL",)]
    assert "--new-session" not in argv  # it would take the server out of the group the escalation signals
    assert "--unshare-net" not in argv  # network on by default


def test_network_off_is_a_network_namespace_of_its_own():
    assert "--unshare-net" in SandboxPolicy(network=False).argv(["/usr/bin/true"])


def test_the_system_is_read_only_and_tmp_home_proc_dev_are_its_own():
    argv = sandbox_part(SandboxPolicy().argv(["/usr/bin/true"]))
    assert ("/usr", "/usr") in pairs(argv, "--ro-bind-try")
    assert ("/etc/resolv.conf", "/etc/resolv.conf") in pairs(argv, "--ro-bind-try")
    assert not any(path == "/etc" for path, _ in pairs(argv, "--ro-bind-try"))  # never all of /etc
    assert not pairs(argv, "--bind") and not pairs(argv, "--bind-try")  # nothing of the host writable
    assert pairs(argv, "--tmpfs", 1) == [("/tmp",), (HOME,)]
    assert pairs(argv, "--proc", 1) == [("/proc",)] and pairs(argv, "--dev", 1) == [("/dev",)]


def test_binds_are_read_only_unless_marked_writable():
    policy = SandboxPolicy(binds=(Bind.parse("/srv/tools"), Bind.parse("/srv/data:rw"), Bind.parse("/srv/x:ro")))
    argv = sandbox_part(policy.argv(["/usr/bin/true"]))
    assert ("/srv/tools", "/srv/tools") in pairs(argv, "--ro-bind-try")
    assert ("/srv/x", "/srv/x") in pairs(argv, "--ro-bind-try")
    assert pairs(argv, "--bind-try") == [("/srv/data", "/srv/data")]


def test_a_relative_bind_is_an_error():
    with pytest.raises(ValueError):
        Bind.parse("var")


def test_hidden_paths_are_masked_where_a_bind_would_show_them():
    policy = SandboxPolicy(binds=(Bind("/srv/portal"),), hidden=("/srv/portal/var", "/srv/portal/key", "/elsewhere"))
    argv = policy.argv(["/usr/bin/true"], is_dir=lambda path: path.endswith("var"), exists=lambda path: True)
    assert ("/srv/portal/var",) in pairs(argv, "--tmpfs", 1)
    assert pairs(argv, "--ro-bind") == [("/dev/null", "/srv/portal/key")]
    assert "/elsewhere" not in argv  # not under a bind: not there to mask
    assert not policy.shows("/srv/portal/var/portal.sqlite3")
    assert policy.shows("/srv/portal/sessions")


def test_the_command_starts_in_its_cwd_or_home_with_its_stop_signals_reset():
    argv = SandboxPolicy().argv(["/usr/bin/python3", "-m", "srv"], cwd="/srv/tools")
    assert pairs(argv, "--chdir", 1) == [("/srv/tools",)]
    assert argv[argv.index("--") + 1 :] == [ENV, "--default-signal=INT,TERM", "/usr/bin/python3", "-m", "srv"]
    assert pairs(SandboxPolicy().argv(["/usr/bin/true"]), "--chdir", 1) == [(HOME,)]


def test_what_the_sandbox_shows():
    policy = SandboxPolicy(binds=(Bind("/srv/portal/sessions"),))
    assert policy.shows("/usr/bin/node") and policy.shows("/tmp/x") and policy.shows(HOME)
    assert policy.shows("/srv/portal/sessions/mcp/demo_server.py")
    assert policy.shows("/srv/portal")  # a parent of a bind: an empty directory inside
    assert not policy.shows("/srv/portal-other") and not policy.shows("/root/.ssh") and not policy.shows("/etc/shadow")


def test_the_environment_is_the_basics_home_inside_and_the_servers_own():
    env = SandboxPolicy().environment({"PATH": "/usr/bin", "HOME": "/root"}, {"TOKEN": "t"})
    assert env == {"PATH": "/usr/bin", "HOME": HOME, "TOKEN": "t"}


def test_secrets_in_the_env_never_reach_the_command_line():
    argv = SandboxPolicy().argv(["/usr/bin/true"])
    assert "--setenv" not in argv and "--clearenv" not in argv  # the environment is passed as one, never in argv
