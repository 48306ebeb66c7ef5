"""Protocol eras: a handshake-only server (the 1.x SDK, and a hand-written one), what is remembered, mismatches."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sessions.mcp.config import ConnectionKey, Negotiated, ServerConfig
from sessions.mcp.failure import ConnectionFailed
from sessions.mcp.ssrf import LOCAL_NETWORK
from tests.conftest import ROOT
from tests.helpers import stdio_demo

LEGACY_SERVER = str(ROOT / "tests" / "servers" / "legacy_server.py")


def legacy_config(log: Path, **overrides) -> ServerConfig:
    env = {"LEGACY_LOG": str(log), **overrides.pop("env", {})}
    return ServerConfig(
        network=LOCAL_NETWORK,
        name="legacy",
        transport="stdio",
        command=sys.executable,
        args=(LEGACY_SERVER,),
        env=env,
        **overrides,
    )


def test_auto_falls_back_to_the_handshake_with_an_mcp_1x_server(pool, mcp1_python):
    config = ServerConfig(
        network=LOCAL_NETWORK,
        name="v1",
        transport="stdio",
        command=mcp1_python,
        args=(str(ROOT / "tests" / "servers" / "v1_server.py"),),
    )
    key = ConnectionKey.for_owner(1, config, "user:1")

    async def scenario():
        outcome = await pool.call_tool(key, config, "hello", {"name": "portal"})
        return outcome, (await pool.connection(key, config)).negotiated

    outcome, negotiated = pool.run(scenario(), timeout=120)
    assert outcome.status == "succeeded", outcome.failure
    assert outcome.result["content"][0]["text"] == "hello portal from mcp 1.x"
    assert negotiated.era == "legacy" and negotiated.protocol_version == "2025-11-25"
    assert negotiated.fingerprint == config.fingerprint() and negotiated.discover is None


def test_a_remembered_legacy_server_is_not_probed_again(pool, tmp_path):
    log = tmp_path / "methods.log"
    config = legacy_config(log)
    first = pool.run(pool.probe(config), timeout=60)
    assert first["era"] == "legacy" and first["protocol_version"] == "2025-06-18"
    assert log.read_text().splitlines()[:2] == ["server/discover", "initialize"]

    log.write_text("")
    remembered = replace(config, negotiated=Negotiated.from_dict(first["negotiated"]))
    key = ConnectionKey.for_owner(1, remembered, "user:1")
    outcome = pool.run(pool.call_tool(key, remembered, "hello", {"name": "again"}), timeout=60)
    assert outcome.status == "succeeded"
    assert "server/discover" not in log.read_text().splitlines()
    assert log.read_text().splitlines()[0] == "initialize"


def test_what_was_remembered_for_another_config_is_ignored(tmp_path):
    config = legacy_config(tmp_path / "log")
    stale = Negotiated(era="legacy", protocol_version="2025-06-18", fingerprint="0" * 16)
    assert replace(config, negotiated=stale).connect_mode() == ("auto", None)
    fresh = replace(stale, fingerprint=config.fingerprint())
    assert replace(config, negotiated=fresh).connect_mode() == ("legacy", None)
    assert replace(config, protocol="legacy").connect_mode() == ("legacy", None)


def test_a_remembered_modern_server_is_adopted_without_a_probe(pool):

    config = stdio_demo()
    first = pool.run(pool.probe(config), timeout=60)
    assert first["era"] == "modern" and first["negotiated"]["discover"]["supportedVersions"]
    remembered = replace(config, negotiated=Negotiated.from_dict(first["negotiated"]))
    assert remembered.connect_mode()[0] == "2026-07-28"
    key = ConnectionKey.for_owner(1, remembered, "user:1")
    outcome = pool.run(pool.call_tool(key, remembered, "echo", {"message": "no probe"}), timeout=60)
    assert outcome.status == "succeeded"
    assert {t["name"] for t in pool.run(pool.list_tools(key, remembered), timeout=30)} >= {"echo", "add"}


def test_the_modern_setting_refuses_a_handshake_only_server(pool, tmp_path):
    with pytest.raises(ConnectionFailed) as caught:
        pool.run(pool.probe(legacy_config(tmp_path / "log", protocol="modern")), timeout=60)
    assert caught.value.failure.kind in ("protocol", "protocol_version")
    assert "-32601" in caught.value.failure.message or "Method not found" in caught.value.failure.message


def test_diagnosis_protocol_version_mismatch(pool, tmp_path):
    config = legacy_config(tmp_path / "log", env={"LEGACY_PROTOCOL_VERSION": "1999-01-01"})
    with pytest.raises(ConnectionFailed) as caught:
        pool.run(pool.probe(config), timeout=60)
    failure = caught.value.failure
    assert failure.kind == "protocol_version" and "1999-01-01" in failure.message


def test_tools_are_listed_over_every_page(pool, tmp_path):
    log = tmp_path / "methods.log"
    config = legacy_config(log, env={"LEGACY_TOOL_PAGES": "4"})
    key = ConnectionKey.for_owner(1, config, "user:1")
    tools = pool.run(pool.list_tools(key, config), timeout=60)
    assert [t["name"] for t in tools] == ["hello", "hello_1", "hello_2", "hello_3"]
    assert log.read_text().splitlines().count("tools/list") == 4


def test_only_what_the_capabilities_declare_is_listed(pool, tmp_path):
    log = tmp_path / "methods.log"
    config = legacy_config(log, env={"LEGACY_NO_TOOLS": "1"})
    key = ConnectionKey.for_owner(1, config, "user:1")
    assert pool.run(pool.list_tools(key, config), timeout=60) == []
    assert "tools/list" not in log.read_text().splitlines()
