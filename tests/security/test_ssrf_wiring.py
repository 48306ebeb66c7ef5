"""The SSRF policy where connections open: the HTTP, SSE and WebSocket transports, Test connection,
and the registration form. Every address connected to here is on 127.0.0.1; addresses that must
never be reached are checked without sending them anything."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from servers.models import Server
from sessions.mcp.config import ServerConfig
from sessions.mcp.ssrf import LOCAL_NETWORK, AddressRefused, NetworkPolicy, resolve
from tests.helpers import logged_in, probe_failure

STRICT = NetworkPolicy(allow_private=False)


@pytest.fixture(params=["http", "sse", "websocket"])
def local_url(request) -> tuple[str, str]:
    fixture = {"http": "demo_http_url", "sse": "demo_sse_url", "websocket": "demo_websocket_url"}[request.param]
    return request.param, request.getfixturevalue(fixture)


def test_a_loopback_server_is_refused_at_connect_time_unless_the_operator_allows_it(pool, local_url):
    transport, url = local_url
    failure = probe_failure(pool, ServerConfig(name="x", transport=transport, url=url, network=STRICT))
    assert failure.kind == "address_refused", failure
    assert "127.0.0.1" in failure.message and "loopback or private" in failure.message
    # The same server, with private addresses allowed: it answers.
    info = pool.run(pool.probe(ServerConfig(name="x", transport=transport, url=url, network=LOCAL_NETWORK)), 60)
    assert info["tool_count"] > 0


def test_a_name_is_resolved_and_every_address_checked(pool, demo_http_url):
    # "localhost" is a name: it is resolved at connect time and its addresses (127.0.0.1, ::1) refused.
    url = demo_http_url.replace("127.0.0.1", "localhost")
    failure = probe_failure(pool, ServerConfig(name="x", transport="http", url=url, network=STRICT))
    assert failure.kind == "address_refused" and "localhost resolves to" in failure.message


@pytest.mark.parametrize(
    "host",
    [
        "169.254.169.254",
        "fd00:ec2::254",
        "169.254.1.1",
        "0.0.0.0",
        "224.0.0.1",
        "168.63.129.16",
        "2002:a9fe:a9fe::1",
        "64:ff9b::a9fe:a9fe",
    ],
)
def test_metadata_and_special_addresses_are_refused_before_any_connection(host):
    # resolve() is what every transport calls before connecting: it raises, so nothing is sent.
    with pytest.raises(AddressRefused) as caught:
        asyncio.run(resolve(host, 80, LOCAL_NETWORK))
    assert caught.value.kind == "address_refused"


@pytest.mark.parametrize(
    "url, embedded",
    [
        ("http://[2002:7f00:1::1]:{port}/mcp", "127.0.0.1"),  # 6to4
        ("http://[64:ff9b::7f00:1]:{port}/mcp", "127.0.0.1"),  # NAT64
        ("ws://[2001:0:7f00:1::1]:{port}/", "127.0.0.1"),  # Teredo
    ],
)
def test_an_ipv6_literal_embedding_loopback_is_refused_at_connect_time(pool, url, embedded):
    transport = "websocket" if url.startswith("ws") else "http"
    config = ServerConfig(name="x", transport=transport, url=url.format(port=8000), network=STRICT)
    failure = probe_failure(pool, config)
    assert failure.kind == "address_refused", failure
    assert f"an IPv6 address embedding {embedded}, a loopback or private address" in failure.message


def test_the_azure_wireserver_is_refused_at_connect_time_even_where_private_addresses_are_allowed(pool):
    failure = probe_failure(
        pool, ServerConfig(name="x", transport="http", url="http://168.63.129.16/mcp", network=LOCAL_NETWORK)
    )
    assert failure.kind == "address_refused" and "Azure WireServer" in failure.message, failure


def test_a_dns_failure_refuses(pool):
    for transport, url in [("http", "http://no-such-host.invalid/mcp"), ("websocket", "ws://no-such-host.invalid/")]:
        failure = probe_failure(pool, ServerConfig(name="x", transport=transport, url=url, network=LOCAL_NETWORK))
        assert failure.kind == "dns" and "cannot be resolved" in failure.message


class Redirecting(BaseHTTPRequestHandler):
    """Answers everything with a redirect to the cloud metadata address."""

    protocol_version = "HTTP/1.1"  # what a WebSocket client expects
    requests: list[str] = []

    def _redirect(self) -> None:
        Redirecting.requests.append(f"{self.command} {self.path}")
        self.send_response(307)
        self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _redirect

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def redirecting_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("transport,path", [("http", "/mcp"), ("sse", "/sse"), ("websocket", "/")])
def test_redirects_are_not_followed(pool, redirecting_url, transport, path):
    url = redirecting_url + path
    if transport == "websocket":
        url = url.replace("http://", "ws://")
    failure = probe_failure(pool, ServerConfig(name="x", transport=transport, url=url, network=LOCAL_NETWORK))
    assert failure.kind == "redirect", failure
    assert "169.254.169.254" in failure.message and "follows no redirect" in failure.message


# -- the portal: the operator's setting, Test connection, the registration form -----------------


@pytest.mark.django_db(transaction=True)
def test_test_connection_says_why_a_private_address_is_refused(alice, demo_http_url, settings):
    from sessions import worker

    settings.PORTAL_ALLOW_PRIVATE_NETWORK = False  # the distributed mode's default
    server = Server.objects.create(
        team=alice.memberships.get().team, name="local", transport="http", url=demo_http_url, created_by=alice
    )
    worker.execute_test_connection(server.pk, alice.pk)
    server.refresh_from_db()
    assert server.last_test["ok"] is False
    assert server.last_test["kind"] == "address_refused"
    assert "loopback or private address" in server.last_test["message"]

    settings.PORTAL_ALLOW_PRIVATE_NETWORK = True
    worker.execute_test_connection(server.pk, alice.pk)
    server.refresh_from_db()
    assert server.last_test["ok"] is True, server.last_test


def http_form(team, url):
    return {
        "team": team.pk,
        "name": "remote",
        "transport": "http",
        "url": url,
        "headers": "",
        "args": "",
        "env": "",
        "request_timeout": "30",
        "enabled": "on",
    }


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/mcp",
        "http://[fd00:ec2::254]/mcp",
        "http://[fe80::1]/mcp",
        "http://0.0.0.0/mcp",
        "http://168.63.129.16/mcp",
        "http://[2002:a9fe:a9fe::1]/mcp",
        "http://[64:ff9b::a9fe:a9fe]/mcp",
        "http://[2001:0:a9fe:a9fe::1]/mcp",
    ],
)
def test_the_form_refuses_addresses_that_are_never_reached(alice, url, settings):
    settings.PORTAL_ALLOW_PRIVATE_NETWORK = True
    team = alice.memberships.get().team
    response = logged_in(alice).post("/servers/add/", http_form(team, url))
    assert response.status_code == 200
    assert "the portal will not connect to it" in response.content.decode()
    assert not Server.objects.filter(name="remote").exists()


@pytest.mark.django_db
def test_the_form_takes_a_private_address_only_where_the_operator_allows_it(alice, settings):
    team = alice.memberships.get().team
    settings.PORTAL_ALLOW_PRIVATE_NETWORK = False
    response = logged_in(alice).post("/servers/add/", http_form(team, "http://10.0.0.5:8000/mcp"))
    assert "loopback or private address" in response.content.decode()
    settings.PORTAL_ALLOW_PRIVATE_NETWORK = True
    response = logged_in(alice).post("/servers/add/", http_form(team, "http://10.0.0.5:8000/mcp"))
    assert response.status_code == 302
    assert Server.objects.filter(name="remote").exists()


@pytest.mark.django_db
def test_an_import_with_a_metadata_url_is_refused(alice):
    from servers.actions import plan_import

    plan = plan_import(alice.memberships.get().team, '{"mcpServers": {"meta": {"url": "http://169.254.169.254/"}}}')
    (entry,) = plan.entries
    assert entry.status == "error" and "cloud metadata" in entry.message
