"""The operator's list of stdio commands (sessions/mcp/commands.py): templates and how they match,
and the env names a server may not set. Pure functions, every case in a table."""

from __future__ import annotations

import sys

import pytest

from sessions.mcp.commands import (
    CommandRefused,
    CommandTemplate,
    check_command,
    command_allowed,
    refused_env_names,
)

NPX = "npx -y {package} ..."
UVX = "uvx {package}"
MODULE = "python3 -m tests.servers.{module} ..."
SCOPED = "npx -y @modelcontextprotocol/{server}"

CASES = [
    # (entry, command, args, allowed)
    ("npx", "npx", [], True),
    ("npx", "npx", ["-y", "anything", "--at", "all"], True),  # an executable alone: any arguments
    ("npx", "uvx", ["x"], False),
    (NPX, "npx", ["-y", "@modelcontextprotocol/server-memory"], True),
    (NPX, "npx", ["-y", "pkg@1.2.3", "--port", "3", "/srv/data"], True),  # `...`: anything after
    (NPX, "npx", ["-y"], False),  # the filled part is missing
    (NPX, "npx", ["pkg"], False),  # the literal -y is missing
    (NPX, "npx", ["-y", "--call=sh -c id"], False),  # a filled part never becomes an option
    (NPX, "npx", ["-y", "-p", "evil"], False),
    (NPX, "npx", ["-y", "pkg with space"], False),
    (NPX, "npx", ["-y", "${SECRET}"], False),  # filled parts are literal text
    (NPX, "npx", ["-y", "'quoted'"], False),
    (NPX, "npx", ["-y", "../../etc"], False),  # no ".." in a filled part
    (UVX, "uvx", ["mcp-server-time"], True),
    (UVX, "uvx", ["mcp-server-time", "--local-timezone", "UTC"], False),  # no `...`: exactly that
    (UVX, "uvx", [], False),
    (MODULE, "python3", ["-m", "tests.servers.fault_server"], True),
    (MODULE, "python3", ["-m", "tests.servers.fault_server", "stdio"], True),
    (MODULE, "python3", ["-m", "tests.servers."], False),  # a filled part has at least one character
    (MODULE, "python3", ["-m", "os"], False),
    (MODULE, "python3", ["-c", "tests.servers.x"], False),
    (MODULE, "python3", ["-m", "tests.servers.x..y"], False),
    (SCOPED, "npx", ["-y", "@modelcontextprotocol/server-everything"], True),
    (SCOPED, "npx", ["-y", "@attacker/server-everything"], False),
    (SCOPED, "npx", ["-y", "@modelcontextprotocol/../attacker/x"], False),
    ("'/opt/my tools/server' --stdio", "/opt/my tools/server", ["--stdio"], True),  # quoted like a shell
]


@pytest.mark.parametrize(("entry", "command", "args", "allowed"), CASES)
def test_templates_match_exactly_what_they_say(entry, command, args, allowed):
    assert command_allowed(command, args, [entry]) is allowed


def test_an_empty_list_allows_nothing_and_none_allows_anything():
    assert command_allowed("npx", ["-y", "x"], []) is False
    with pytest.raises(CommandRefused, match="none"):
        check_command("/bin/sh", ["-c", "id"], ())
    check_command("/bin/sh", ["-c", "id"], None)  # an operator's command


def test_the_executable_matches_by_the_file_it_resolves_to():
    # The list names the interpreter by one path, the server by another that is the same file.
    import os

    real = os.path.realpath(sys.executable)
    assert command_allowed(sys.executable, ["-V"], [real])
    assert command_allowed(real, ["-V"], [f"{sys.executable} -V"])
    assert not command_allowed("/bin/sh", ["-V"], [sys.executable])


def test_the_refusal_names_the_command_and_what_is_allowed():
    with pytest.raises(CommandRefused) as caught:
        check_command("/bin/sh", ["-c", "cat /etc/passwd"], [NPX, UVX])
    assert str(caught.value) == (
        "\"/bin/sh -c 'cat /etc/passwd'\" is not among the commands this portal allows "
        "(npx -y {package} ..., uvx {package})"
    )


@pytest.mark.parametrize(
    "text", ["", "npx ... -y", "npx {pkg", "npx {pkg}}", "npx {}"], ids=["empty", "rest", "open", "close", "nameless"]
)
def test_a_malformed_template_is_an_error(text):
    with pytest.raises(ValueError):
        CommandTemplate.parse(text)


ENV_CASES = [
    ("LD_PRELOAD", True),
    ("LD_LIBRARY_PATH", True),
    ("LD_AUDIT", True),
    ("PATH", True),
    ("PYTHONSTARTUP", True),
    ("PYTHONPATH", True),
    ("PYTHONHOME", True),
    ("PYTHONINSPECT", True),
    ("PYTHONWARNINGS", True),
    ("PYTHONBREAKPOINT", True),
    ("PYTHONSOMETHINGNEW", True),  # a hook a later Python adds is refused until listed as harmless
    ("PYTHONUNBUFFERED", False),
    ("PYTHONIOENCODING", False),
    ("NODE_OPTIONS", True),
    ("NODE_PATH", True),
    ("NODE_ENV", False),
    ("BASH_ENV", True),
    ("ENV", True),
    ("PERL5OPT", True),
    ("JAVA_TOOL_OPTIONS", True),
    ("GCONV_PATH", True),
    ("GITHUB_TOKEN", False),
    ("HOME", False),
    ("path", False),  # names are case-sensitive: no loader or shell reads this one
]


@pytest.mark.parametrize(("name", "refused"), ENV_CASES)
def test_env_names_that_change_how_a_program_starts_are_refused(name, refused):
    assert (refused_env_names({name: "x"}) == [name]) is refused
