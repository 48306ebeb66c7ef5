""" "Test connection" names the failing layer: DNS, refused, TLS, HTTP status, 401, wrong path,
protocol version (tests/test_connection_eras.py), a missing variable, the process with its stderr."""

from __future__ import annotations

import datetime
import ssl
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sessions.mcp.config import ServerConfig
from sessions.mcp.pool import PoolSettings
from sessions.mcp.ssrf import LOCAL_NETWORK
from sessions.mcp.variables import MissingVariable, VariableNotAvailable, expand, expand_config
from tests.conftest import ServerProcess, connection_pool
from tests.helpers import probe_failure


@pytest.fixture(scope="module")
def pool():
    """One pool for the module's tests, with the periodic health check off as in `pool`."""
    with connection_pool(PoolSettings(health_seconds=0)) as pool:
        yield pool


@pytest.fixture(scope="module")
def token_server() -> Iterator[ServerProcess]:
    """The demo server over Streamable HTTP, answering 401 to requests without `X-Token: s3cret`."""
    server = ServerProcess("http", "--require-header", "X-Token=s3cret").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def self_signed_https_url(tmp_path_factory) -> Iterator[str]:
    """An HTTPS server whose certificate no one trusts."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    folder = tmp_path_factory.mktemp("tls")
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{httpd.server_address[1]}/mcp"
    httpd.shutdown()


def test_dns(pool):
    failure = probe_failure(
        pool, ServerConfig(network=LOCAL_NETWORK, name="x", transport="http", url="http://no-such-host.invalid/mcp")
    )
    assert failure.kind == "dns" and "no-such-host.invalid" in failure.message


def test_dns_over_websocket(pool):
    failure = probe_failure(
        pool, ServerConfig(network=LOCAL_NETWORK, name="x", transport="websocket", url="ws://no-such-host.invalid/")
    )
    assert failure.kind == "dns"


def test_tls(pool, self_signed_https_url):
    failure = probe_failure(
        pool, ServerConfig(network=LOCAL_NETWORK, name="x", transport="http", url=self_signed_https_url)
    )
    assert failure.kind == "tls" and "certificate" in failure.message.lower()


def test_401_needs_auth_over_http_and_sse(pool, token_server):
    for transport, path in (("http", "/mcp"), ("sse", "/sse")):
        url = f"http://127.0.0.1:{token_server.port}{path}"
        failure = probe_failure(pool, ServerConfig(network=LOCAL_NETWORK, name="x", transport=transport, url=url))
        assert (failure.kind, failure.status_code) == ("needs_auth", 401), transport
        assert "needs authorization" in failure.message


def test_wrong_path_over_sse_and_websocket(pool, demo_sse_url, demo_http_url):
    sse = probe_failure(
        pool, ServerConfig(network=LOCAL_NETWORK, name="x", transport="sse", url=demo_sse_url.replace("/sse", "/nope"))
    )
    assert (sse.kind, sse.status_code) == ("http_status", 404) and "wrong path" in sse.message
    # A WebSocket client knocking on an HTTP-only endpoint gets an HTTP status, not a socket.
    ws = probe_failure(
        pool,
        ServerConfig(
            network=LOCAL_NETWORK, name="x", transport="websocket", url=demo_http_url.replace("http", "ws", 1)
        ),
    )
    assert ws.kind == "http_status" and ws.status_code is not None


def test_header_variables_are_expanded_from_the_portal_environment(pool, token_server, monkeypatch):
    url = f"http://127.0.0.1:{token_server.port}/mcp"
    config = ServerConfig(
        network=LOCAL_NETWORK,
        name="x",
        transport="http",
        url=url,
        headers={"X-Token": "${PORTAL_TEST_TOKEN}"},
        variables={"PORTAL_TEST_TOKEN": "s3cret"},
    )
    assert pool.run(pool.probe(config), timeout=60)["tool_count"] > 0
    headers = {"X-Token": "${PORTAL_TEST_TOKEN}"}
    # Exposed to servers but not set in the portal's environment.
    missing = probe_failure(
        pool,
        ServerConfig(
            network=LOCAL_NETWORK,
            name="x",
            transport="http",
            url=url,
            headers=headers,
            variables={"PORTAL_TEST_TOKEN": None},
        ),
    )
    assert missing.kind == "missing_variable"
    assert "${PORTAL_TEST_TOKEN}" in missing.message and "header X-Token" in missing.message
    # Not exposed at all: never looked up, whatever the environment holds.
    monkeypatch.setenv("PORTAL_TEST_TOKEN", "s3cret")
    refused = probe_failure(
        pool, ServerConfig(network=LOCAL_NETWORK, name="x", transport="http", url=url, headers=headers)
    )
    assert refused.kind == "variable_not_available"
    assert "${PORTAL_TEST_TOKEN} in the header X-Token is not available to servers" in refused.message


def test_process_exit_with_stderr(pool):
    config = ServerConfig(
        network=LOCAL_NETWORK,
        name="x",
        transport="stdio",
        command=sys.executable,
        args=("-c", "import sys; sys.stderr.write('fatal: no ${HOME} here\\n'); sys.exit(2)"),
        variables={"HOME": "/home/x"},
    )
    failure = probe_failure(pool, config)
    assert failure.kind == "process_exited" and "fatal: no /home/x here" in failure.stderr_tail


def test_expansion_rules():
    exposed = {"A": "a", "B": "b", "EMPTY": "", "UNSET": None}
    assert expand("${A}/${B}", exposed) == "a/b"
    assert expand("${MISSING:-fallback} ${EMPTY:-was empty} [${EMPTY}]", exposed) == "fallback was empty []"
    assert expand("$HOME and ${not a ref} stay", exposed) == "$HOME and ${not a ref} stay"
    with pytest.raises(MissingVariable) as caught:
        expand("x${UNSET}", exposed, where="URL")
    assert str(caught.value) == "${UNSET} in the URL is not set" and caught.value.name == "UNSET"
    with pytest.raises(VariableNotAvailable) as refused:
        expand("x${NOPE}", exposed, where="URL")
    assert refused.value.kind == "variable_not_available" and "not available to servers" in str(refused.value)


def test_expansion_is_one_pass_and_what_it_fills_in_is_literal():
    exposed = {"A": "${B}", "B": "never-read"}
    # A variable's value, a secret's value and a default are never expanded again.
    assert expand("${A}", exposed) == "${B}"
    assert expand("${secret:S}", exposed, {"S": "${B}"}) == "${B}"
    assert expand("${secret:S}", exposed, {"S": "${secret:T}"}, "URL") == "${secret:T}"
    # The default ends at the first "}": "${B" is kept as written, and the "}" after it too.
    assert expand("${NOT_EXPOSED:-${B}}", exposed) == "${B}"


def test_expansion_covers_every_field_and_never_touches_the_stored_config():
    config = ServerConfig(
        network=LOCAL_NETWORK,
        name="x",
        transport="stdio",
        command="${BIN}",
        args=("--token", "${T}"),
        env={"KEY": "${T}"},
        cwd="${DIR:-/tmp}",
        url="https://${HOST}/mcp",
        headers={"Authorization": "Bearer ${T}"},
        variables={"BIN": "/bin/x", "T": "t-1", "HOST": "h", "DIR": None},
    )
    expanded = expand_config(config)
    assert (expanded.command, expanded.args, expanded.env, expanded.cwd) == (
        "/bin/x",
        ("--token", "t-1"),
        {"KEY": "t-1"},
        "/tmp",
    )
    assert (expanded.url, expanded.headers) == ("https://h/mcp", {"Authorization": "Bearer t-1"})
    assert config.headers == {"Authorization": "Bearer ${T}"} and expanded.fingerprint() != config.fingerprint()
    assert "t-1" not in repr(config)


def test_an_error_the_server_already_prefixed_is_not_prefixed_again(pool):
    from sessions.mcp.config import ConnectionKey
    from tests.conftest import ROOT

    config = ServerConfig(
        network=LOCAL_NETWORK,
        name="faulty",
        transport="stdio",
        command=sys.executable,
        args=("-m", "tests.servers.fault_server"),
        cwd=str(ROOT),
        protocol="legacy",
    )
    key = ConnectionKey.for_owner(1, config, "user:1")
    outcome = pool.run(pool.call_tool(key, config, "prefixed_error", {}), timeout=60)
    assert outcome.status == "failed", outcome
    assert outcome.failure.message == "MCP error -32602: Invalid arguments for tool prefixed_error"
