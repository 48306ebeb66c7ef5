"""Reading and writing mcpServers JSON on its own (no database): shapes, errors, placeholders, secrets."""

from __future__ import annotations

import json
from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from servers.mcp_json import export, mark_duplicates, parse, placeholders_in, strip_jsonc

SUPPORTED = ("stdio", "http")

CLAUDE_DESKTOP = """{
  "mcpServers": {
    "filesystem": {
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-filesystem", "/Users/me/Desktop"]
    },
    "github": {
      "command": "docker",
      "args": ["run", "-i", "--rm", "-e", "GITHUB_PERSONAL_ACCESS_TOKEN", "ghcr.io/github/github-mcp-server"],
      "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}
    }
  }
}"""


def server(**fields):
    defaults = dict(name="s", transport="stdio", command="", args=[], env={}, cwd="", url="", headers={}, enabled=True)
    return SimpleNamespace(**{**defaults, **fields})


def by_name(parsed):
    return {entry.name: entry for entry in parsed.entries}


def test_it_reads_a_claude_desktop_config_and_keeps_placeholders():
    parsed = parse(CLAUDE_DESKTOP, SUPPORTED)
    assert parsed.ok and parsed.shape == "mcpServers"
    fs, gh = by_name(parsed)["filesystem"], by_name(parsed)["github"]
    assert (fs.transport, fs.status, fs.fields["command"]) == ("stdio", "new", "npx")
    assert fs.fields["args"][-1] == "/Users/me/Desktop" and fs.fields["enabled"] is True
    assert gh.fields["env"] == {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}
    assert gh.placeholders == ["${GITHUB_TOKEN}"]
    assert [e.name for e in parsed.to_create] == ["filesystem", "github"]


def test_it_reads_claude_code_and_cursor_remote_servers():
    text = json.dumps(
        {
            "mcpServers": {
                "linear": {"type": "http", "url": "https://mcp.linear.app/mcp", "headers": {"X-Team": "eng"}},
                "cursor-style": {"url": "https://example.com/mcp"},
                "windsurf-style": {"serverUrl": "https://example.com/mcp"},
                "api": {
                    "type": "streamable-http",
                    "url": "https://${HOST}/mcp",
                    "headers": {"Authorization": "Bearer ${API_TOKEN}"},
                },
            }
        }
    )
    entries = by_name(parse(text, SUPPORTED))
    assert {name: (e.transport, e.status) for name, e in entries.items()} == {
        "linear": ("http", "new"),
        "cursor-style": ("http", "new"),
        "windsurf-style": ("http", "new"),
        "api": ("http", "new"),
    }
    assert entries["linear"].fields == {
        "enabled": True,
        "url": "https://mcp.linear.app/mcp",
        "headers": {"X-Team": "eng"},
    }
    assert "taken as Streamable HTTP" in entries["cursor-style"].notes[0]
    assert entries["api"].placeholders == ["${HOST}", "${API_TOKEN}"]


def test_it_reads_vscode_files_with_comments_and_trailing_commas_and_vscode_settings():
    mcp_json = """{
      // VS Code's .vscode/mcp.json
      "inputs": [{"type": "promptString", "id": "key", "password": true}],
      "servers": {
        "memory": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory",],},
        /* a remote one */
        "docs": {"type": "http", "url": "https://example.com/mcp//v1", "headers": {"Key": "${input:key}"}},
      },
    }"""
    parsed = parse(mcp_json, SUPPORTED)
    assert parsed.ok and parsed.shape == "servers"
    entries = by_name(parsed)
    assert entries["memory"].fields["args"] == ["-y", "@modelcontextprotocol/server-memory"]
    assert entries["docs"].fields["url"] == "https://example.com/mcp//v1"  # a // inside a string is not a comment
    assert entries["docs"].placeholders == ["${input:key}"]
    settings = parse(json.dumps({"mcp": {"servers": {"memory": {"command": "npx"}}}}), SUPPORTED)
    assert settings.ok and settings.shape == "mcp.servers"


def test_sse_and_websocket_entries_wait_for_their_transports_and_light_up_when_they_exist():
    text = json.dumps(
        {
            "mcpServers": {
                "old": {"type": "sse", "url": "https://example.com/sse"},
                "guessed": {"url": "https://example.com/v1/sse"},
                "socket": {"type": "ws", "url": "wss://example.com/mcp"},
                "local": {"command": "uvx", "args": ["mcp-server-time"]},
            }
        }
    )
    today = parse(text, SUPPORTED)
    assert {e.name: e.status for e in today.entries} == {
        "old": "unsupported",
        "guessed": "unsupported",
        "socket": "unsupported",
        "local": "new",
    }
    assert today.ok and [e.name for e in today.to_create] == ["local"]  # the rest is skipped, not blocking
    assert "sse transport is not supported yet" in by_name(today)["old"].message
    later = parse(text, ("stdio", "http", "sse", "websocket"))
    assert {e.name: (e.transport, e.status) for e in later.entries} == {
        "old": ("sse", "new"),
        "guessed": ("sse", "new"),
        "socket": ("websocket", "new"),
        "local": ("stdio", "new"),
    }


def test_malformed_json_and_unknown_shapes_are_clear_errors_with_nothing_to_create():
    cases = {
        '{"mcpServers": {"a": {"command": "x"}': "This is not valid JSON",
        "[1, 2]": "Unknown shape",
        '{"servers_typo": {}}': "Unknown shape",
        '{"mcpServers": []}': '"mcpServers" must be an object',
        '{"mcpServers": {}}': "lists no servers",
        "": "This is not valid JSON",
    }
    for text, message in cases.items():
        parsed = parse(text, SUPPORTED)
        assert message in parsed.error, (text, parsed.error)
        assert not parsed.ok and parsed.entries == [] and parsed.to_create == []


def test_each_bad_entry_says_what_is_wrong_and_blocks_the_whole_import():
    text = json.dumps(
        {
            "mcpServers": {
                "good": {"command": "npx"},
                "no-target": {"env": {"A": "b"}},
                "both": {"command": "x", "url": "https://e.com"},
                "bad-args": {"command": "x", "args": "--flag"},
                "bad-env": {"command": "x", "env": {"A": 1}},
                "bad-env-name": {"command": "x", "env": {"1A": "b"}},
                "bad-type": {"type": "carrier-pigeon", "url": "https://e.com"},
                "bad-url": {"type": "http", "url": "ftp://e.com/mcp"},
                "bad-headers": {"type": "http", "url": "https://e.com", "headers": {"Bad Header": "x"}},
                "not-an-object": "npx foo",
                "bad name!" * 10: {"command": "x"},
                "my server": {"command": "x"},
                "my_server": {"command": "x"},
                "flag": {"command": "x", "disabled": "yes"},
            }
        }
    )
    parsed = parse(text, SUPPORTED)
    messages = {e.name: e.message for e in parsed.entries if e.status == "error"}
    assert set(messages) == {
        "no-target",
        "both",
        "bad-args",
        "bad-env",
        "bad-env-name",
        "bad-type",
        "bad-url",
        "bad-headers",
        "not-an-object",
        "bad name!" * 10,
        "my_server",
        "flag",
    }
    assert 'needs a "command"' in messages["no-target"]
    assert '"args" must be a list of strings' in messages["bad-args"]
    assert "Unknown \"type\" 'carrier-pigeon'" in messages["bad-type"]
    assert "http:// or https://" in messages["bad-url"]
    assert "Same name as 'my server'" in messages["my_server"]
    assert not parsed.ok and parsed.to_create == []
    assert by_name(parsed)["good"].status == "new"


def test_names_the_team_already_has_are_duplicates():
    parsed = mark_duplicates(parse(CLAUDE_DESKTOP, SUPPORTED), ["GitHub", "other"])
    assert {e.name: e.status for e in parsed.entries} == {"filesystem": "new", "github": "duplicate"}
    assert parsed.ok and [e.name for e in parsed.to_create] == ["filesystem"]


def test_export_holds_back_every_secret_and_says_so():
    servers = [
        server(
            name="github",
            command="docker",
            args=["run", "--token", "ghp_abc", "--api-key=sk-1", "--verbose", "postgres://me:hunter2@db/x"],
            env={"GITHUB_TOKEN": "ghp_secret", "FROM_ENV": "${HOME_TOKEN}", "EMPTY": ""},
            cwd="/srv",
        ),
        server(
            name="remote",
            transport="http",
            url="https://me:pw@example.com/mcp?api_key=k123&region=eu",
            headers={"Authorization": "Bearer abc.def", "X-Client": "${CLIENT}", "X-Api-Key": "plain"},
            enabled=False,
        ),
    ]
    config, notes = export(servers)
    text = json.dumps(config)
    for secret in ("ghp_abc", "sk-1", "hunter2", "ghp_secret", "k123", "abc.def", "plain", ":pw@"):
        assert secret not in text, secret
    github, remote = config["mcpServers"]["github"], config["mcpServers"]["remote"]
    assert github["args"] == [
        "run",
        "--token",
        "${TOKEN}",
        "--api-key=${API_KEY}",
        "--verbose",
        "postgres://me:${PASSWORD}@db/x",
    ]
    assert github["env"] == {"GITHUB_TOKEN": "${GITHUB_TOKEN}", "FROM_ENV": "${HOME_TOKEN}", "EMPTY": ""}
    assert github["cwd"] == "/srv" and "type" not in github
    assert remote == {
        "type": "http",
        "url": "https://me:${PASSWORD}@example.com/mcp?api_key=${API_KEY}&region=eu",
        "headers": {"Authorization": "Bearer ${AUTHORIZATION}", "X-Client": "${CLIENT}", "X-Api-Key": "${X_API_KEY}"},
        "disabled": True,
    }
    assert "github env GITHUB_TOKEN: the value was replaced by ${GITHUB_TOKEN}" in notes
    assert len(notes) == 8


def test_import_export_import_is_stable():
    original = [
        server(name="local", command="npx", args=["-y", "pkg", "--key", "s3cret"], env={"A": "1", "B": "${B}"}),
        server(name="remote", transport="http", url="https://e.com/mcp?token=t", headers={"Authorization": "Bearer x"}),
        server(name="off", command="uvx", args=["tool"], enabled=False),
    ]
    first, _ = export(original)
    parsed = parse(json.dumps(first), SUPPORTED)
    assert parsed.ok and len(parsed.to_create) == 3
    again = [server(name=e.name, transport=e.transport, **e.fields) for e in parsed.to_create]
    second, notes = export(again)
    assert second == first and notes == []  # nothing left to hold back: it is all placeholders now
    vscode, _ = export(again, shape="servers")
    assert parse(json.dumps(vscode), SUPPORTED).shape == "servers"
    assert (
        export(
            [
                server(name=e.name, transport=e.transport, **e.fields)
                for e in parse(json.dumps(vscode), SUPPORTED).entries
            ]
        )[0]
        == first
    )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('ab/*,"\\\n }]')),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


@given(json_values)
def test_stripping_comments_never_changes_plain_json(value):
    text = json.dumps(value)
    assert json.loads(strip_jsonc(text)) == value


def test_placeholders_with_a_default_need_nothing():
    settings = ["--root", "${ROOT:-/srv}", {"A": "${TOKEN}", "B": "x-${TOKEN}-${REGION:-eu}"}]
    assert placeholders_in(settings) == ["ROOT:-/srv", "TOKEN", "REGION:-eu"]
    assert placeholders_in(settings, without_default=True) == ["TOKEN"]
