"""Personal access tokens, as a person makes and revokes them on "Connect an agent" and an operator
makes them with `manage.py create_access_token`; what the endpoint accepts is `check_token`."""

from __future__ import annotations

import html
import io
import json
import re
import subprocess
import sys
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from servers.models import Server, Team
from sessions.access_tokens import TokenError, check_token, digest, do_create_token
from sessions.models import AccessToken
from tests.conftest import ROOT

TOKEN = re.compile(r'<input [^>]*value="(mcpp_[A-Za-z0-9_-]{43})"[^>]*id="new-token-text"')


def http_server(team: str, name: str, by) -> Server:
    # Never connected to: the page and the tokens only name servers.
    return Server.objects.create(
        team=Team.objects.get(name=team), name=name, transport="http", url="http://127.0.0.1:9/mcp", created_by=by
    )


class AgentPage:
    """A logged-in browser on "Connect an agent": `AgentPage(user).create("laptop")` returns the token it shows."""

    def __init__(self, user):
        self.client = Client()
        self.client.force_login(user)

    def open(self):
        return self.client.get("/agents/")

    def create(self, name: str, servers: list[Server | int] = (), expires_days: str = "") -> str:
        """The token the page shows, or "" when it showed none (self.last is the response)."""
        data = {"name": name, "servers": [getattr(s, "pk", s) for s in servers], "expires_days": expires_days}
        self.last = self.client.post("/agents/", data)
        found = TOKEN.search(self.last.content.decode())
        return found.group(1) if found else ""

    def revoke(self, token_id: int):
        return self.client.post(f"/agents/tokens/{token_id}/revoke/", follow=True)


@pytest.fixture
def globex_server(carol) -> Server:
    return http_server("Globex", "globex-db", carol)


@pytest.fixture
def acme_server(alice) -> Server:
    return http_server("Acme", "acme wiki", alice)


# -- shown once ------------------------------------------------------------------------------------


def test_a_new_token_is_shown_once_in_the_response_that_made_it_and_never_again(bob):
    page = AgentPage(bob)
    text = page.create("laptop Claude Code")
    assert text, page.last.content.decode()
    response = page.last
    assert response.status_code == 200 and "Location" not in response
    assert response["Cache-Control"] == "no-store"
    token = AccessToken.objects.get(user=bob)
    assert check_token(text).user == bob
    # The setup snippets carry it too, in that response only.
    assert response.content.decode().count(text) > 3

    again = page.open()
    body = again.content.decode()
    assert text not in body and text[len(token.prefix) :] not in body
    assert f"{token.prefix}…" in body and "laptop Claude Code" in body
    assert "&lt;your token&gt;" in body
    assert 'id="new-token-text"' not in body


def test_only_the_digest_is_kept(bob):
    text = AgentPage(bob).create("ci")
    token = AccessToken.objects.get(user=bob)
    assert token.digest == digest(text) and token.digest != text
    row = AccessToken.objects.filter(pk=token.pk).values().get()
    assert all(text not in str(value) for value in row.values()), row
    # The prefix is a short start of it, for telling tokens apart: not enough to use.
    assert text.startswith(token.prefix) and len(token.prefix) == len("mcpp_") + 4
    out = io.StringIO()
    call_command("dumpdata", "mcp_sessions.accesstoken", stdout=out)
    assert text not in out.getvalue() and text[len(token.prefix) :] not in out.getvalue()


def test_the_page_needs_a_login():
    response = Client().get("/agents/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_making_and_revoking_need_the_pages_csrf_token(bob):
    text = AgentPage(bob).create("laptop")
    token = AccessToken.objects.get(user=bob)
    other_site = Client(enforce_csrf_checks=True)
    other_site.force_login(bob)
    assert other_site.post("/agents/", {"name": "theirs"}).status_code == 403
    assert other_site.post(f"/agents/tokens/{token.pk}/revoke/").status_code == 403
    assert AccessToken.objects.count() == 1 and check_token(text) is not None
    # Revoking is a POST only: a link cannot do it.
    assert other_site.get(f"/agents/tokens/{token.pk}/revoke/").status_code == 405


# -- revoke ----------------------------------------------------------------------------------------


def test_a_revoked_token_is_refused_at_once(bob):
    page = AgentPage(bob)
    text = page.create("laptop")
    assert check_token(text) is not None
    token = AccessToken.objects.get(user=bob)
    answer = page.revoke(token.pk)
    assert "Revoked laptop" in answer.content.decode()
    assert check_token(text) is None
    row = answer.content.decode().split(f'id="token-{token.pk}"')[1].split("</tr>")[0]
    assert ">revoked<" in row and "Revoke" not in row


def test_another_persons_token_can_be_neither_seen_nor_revoked(alice, bob):
    text = AgentPage(alice).create("alice's laptop")
    token = AccessToken.objects.get(user=alice)
    page = AgentPage(bob)
    body = page.open().content.decode()
    assert "alice&#x27;s laptop" not in body and token.prefix not in body
    answer = page.revoke(token.pk)
    assert "Unknown token." in answer.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is None and check_token(text).user == alice
    # An id that is no number at all is just as unknown.
    assert page.client.post("/agents/tokens/x/revoke/").status_code == 404


# -- limits ----------------------------------------------------------------------------------------


def test_a_token_limited_to_some_servers_reaches_only_those(bob, acme_server):
    other = http_server("Acme", "acme-db", bob)
    text = AgentPage(bob).create("wiki only", [acme_server])
    agent = check_token(text)
    assert agent.servers == frozenset({acme_server.pk})
    assert agent.may_use(acme_server.pk) and not agent.may_use(other.pk)
    body = AgentPage(bob).open().content.decode()
    assert "acme wiki" in body.split('id="token-list"')[1].split("</table>")[0]


def test_a_token_limited_to_a_deleted_server_reaches_none_rather_than_all(bob, acme_server):
    other = http_server("Acme", "acme-db", bob)
    text = AgentPage(bob).create("wiki only", [acme_server])
    acme_server.delete()
    agent = check_token(text)
    assert agent.servers == frozenset() and not agent.may_use(other.pk)
    assert "none (its servers were deleted)" in AgentPage(bob).open().content.decode()


def test_an_unlimited_token_reaches_all_the_persons_servers(bob, acme_server):
    agent = check_token(AgentPage(bob).create("everything"))
    assert agent.servers is None and agent.may_use(acme_server.pk)
    assert "all your servers" in AgentPage(bob).open().content.decode()


def test_a_member_cannot_limit_a_token_to_another_teams_server(bob, acme_server, globex_server):
    page = AgentPage(bob)
    body = page.open().content.decode()
    assert "acme wiki" in body and "globex-db" not in body
    assert page.create("sneaky", [globex_server]) == ""
    assert "You cannot use that server" in page.last.content.decode()
    assert page.create("sneaky", [acme_server, globex_server]) == ""
    assert not AccessToken.objects.exists()
    # The action refuses it too, whoever calls it.
    with pytest.raises(TokenError, match="globex-db"):
        do_create_token(bob, "sneaky", [globex_server])


def test_an_auditor_may_limit_a_token_to_no_server_they_only_see(make_user, acme_server):
    auditor = make_user("dana", role="auditor")
    page = AgentPage(auditor)
    assert "acme wiki" not in page.open().content.decode().split('id="create-token"')[1].split("</form>")[0]
    assert page.create("look only", [acme_server]) == ""


@pytest.mark.parametrize(
    "name, days, error",
    [
        ("", "", "This field is required."),
        ("   ", "", "This field is required."),
        ("x" * 101, "", "at most 100 characters"),
        ("ci", "0", "greater than or equal to 1"),
        ("ci", "3651", "less than or equal to 3650"),
        ("ci", "soon", "Enter a whole number."),
    ],
)
def test_bad_input_gets_a_form_error_and_no_token(bob, name, days, error):
    page = AgentPage(bob)
    assert page.create(name, expires_days=days) == ""
    assert page.last.status_code == 200 and error in page.last.content.decode()
    assert not AccessToken.objects.exists()


# -- expiry and owners -----------------------------------------------------------------------------


def test_an_expired_token_is_refused(bob):
    page = AgentPage(bob)
    text = page.create("a day", expires_days="1")
    token = AccessToken.objects.get(user=bob)
    assert timedelta(hours=23) < token.expires_at - timezone.now() <= timedelta(days=1)
    assert check_token(text) is not None
    AccessToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert check_token(text) is None
    row = page.open().content.decode().split(f'id="token-{token.pk}"')[1].split("</tr>")[0]
    assert ">expired<" in row


def test_a_deactivated_persons_token_is_refused(bob):
    text = AgentPage(bob).create("laptop")
    bob.is_active = False
    bob.save()
    assert check_token(text) is None


def test_last_used_is_written_when_the_token_is_used(bob):
    text = AgentPage(bob).create("laptop")
    assert AccessToken.objects.get(user=bob).last_used_at is None
    check_token(text)
    assert AccessToken.objects.get(user=bob).last_used_at is not None
    assert "ago" in AgentPage(bob).open().content.decode().split('id="token-list"')[1]


def test_text_that_is_no_token_is_refused(bob):
    text = AgentPage(bob).create("laptop")
    for wrong in ("", text[:-1], text + "x", text.upper(), "mcpp_" + "a" * 300, text.removeprefix("mcpp_")):
        assert check_token(wrong) is None, wrong


# -- the setup shown -------------------------------------------------------------------------------


def snippet(body: str, client: str) -> str:
    found = re.search(rf'<pre id="snippet-\d+" data-client="{re.escape(client)}">(.*?)</pre>', body, re.S)
    assert found, client
    return html.unescape(found.group(1))


def test_the_setup_names_the_portals_endpoint_and_the_new_token(bob, acme_server):
    page = AgentPage(bob)
    text = page.create("laptop")
    body = page.last.content.decode()
    url = "http://testserver/mcp/"
    assert snippet(body, "Claude Code") == f"claude mcp add --transport http portal {url}"
    assert snippet(body, "Claude Code, with a token") == (
        f'claude mcp add --transport http portal {url} --header "Authorization: Bearer {text}"'
    )
    cursor = json.loads(snippet(body, "Cursor"))
    assert cursor == {"mcpServers": {"portal": {"url": url, "headers": {"Authorization": f"Bearer {text}"}}}}
    vscode = json.loads(snippet(body, "VS Code"))
    assert vscode["servers"]["portal"] == {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {text}"}}
    desktop = json.loads(snippet(body, "Claude Desktop (through mcp-remote)"))["mcpServers"]["portal"]
    assert desktop["args"] == ["mcp-remote", url, "--header", "Authorization:${AUTH_HEADER}"]
    assert desktop["env"] == {"AUTH_HEADER": f"Bearer {text}"}
    # Each server's own endpoint, under its normalized name.
    assert "http://testserver/mcp/acme_wiki/" in body

    later = page.open().content.decode()
    assert "Bearer &lt;your token&gt;" in later and text not in later


def test_the_python_snippet_runs_and_sends_the_token(bob, tmp_path):
    """The page's Python, run as shown with only the URL changed, against a real Streamable HTTP
    server that prints the Authorization header each request brought."""
    page = AgentPage(bob)
    text = page.create("script")
    code = snippet(page.last.content.decode(), "Python (mcp SDK)")
    port_file = tmp_path / "port"
    seen = tmp_path / "seen"
    server = subprocess.Popen(
        [sys.executable, "-c", HEADER_SERVER, str(port_file), str(seen)], cwd=ROOT, stderr=subprocess.PIPE
    )
    try:
        for _ in range(200):
            if port_file.exists() and port_file.read_text():
                break
            server.poll()
            assert server.returncode is None, server.stderr.read().decode()
            subprocess.run(["sleep", "0.05"])
        url = f"http://127.0.0.1:{port_file.read_text()}/mcp"
        code = code.replace("'http://testserver/mcp/'", repr(url))
        assert repr(url) in code
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["echo"]
        assert seen.read_text().splitlines()[0] == f"Bearer {text}"
    finally:
        server.terminate()
        server.wait(10)


# A Streamable HTTP MCP server with one tool, noting each request's Authorization header.
HEADER_SERVER = """
import socket, sys, uvicorn
from mcp.server.mcpserver import MCPServer
port_file, seen = sys.argv[1], sys.argv[2]
server = MCPServer("headers")

@server.tool()
def echo(text: str) -> str:
    return text

app = server.streamable_http_app(host="127.0.0.1")

async def noting(scope, receive, send):
    if scope["type"] == "http":
        auth = dict(scope["headers"]).get(b"authorization", b"").decode()
        with open(seen, "a") as out:
            out.write(auth + "\\n")
    await app(scope, receive, send)

sock = socket.socket()
sock.bind(("127.0.0.1", 0))
open(port_file, "w").write(str(sock.getsockname()[1]))
uvicorn.Server(uvicorn.Config(noting, log_level="warning", lifespan="on")).run(sockets=[sock])
"""


# -- the command -----------------------------------------------------------------------------------


def run_command(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command("create_access_token", *args, stdout=out, stderr=err)
    assert err.getvalue() == ""
    return out.getvalue()


def test_the_command_prints_only_a_token_the_endpoint_accepts(bob, acme_server):
    printed = run_command("bob", "--servers", "acme wiki", "--expires-days", "30", "--name", "ci")
    text = printed.strip()
    assert printed == text + "\n" and re.fullmatch(r"mcpp_[A-Za-z0-9_-]{43}", text)
    agent = check_token(text)
    assert agent.user == bob and agent.servers == frozenset({acme_server.pk})
    token = AccessToken.objects.get(user=bob)
    assert token.name == "ci" and token.expires_at > timezone.now() + timedelta(days=29)
    # Unlimited and named by default.
    other = run_command("bob").strip()
    assert check_token(other).servers is None
    assert AccessToken.objects.get(digest=digest(other)).name == "made by manage.py"


@pytest.mark.parametrize(
    "args, error",
    [
        (["nobody"], "No user named 'nobody'."),
        (["bob", "--servers", "acme wiki,nope"], "bob may use no server named 'nope'."),
        (["bob", "--servers", "globex-db"], "bob may use no server named 'globex-db'."),
        (["bob", "--expires-days", "0"], "A token expires after 1 to 3650 days, or never."),
        (["bob", "--name", "x" * 101], "a name of 1 to 100 characters"),
    ],
)
def test_the_command_refuses_what_it_cannot_do(bob, acme_server, globex_server, args, error):
    with pytest.raises(CommandError, match=re.escape(error)):
        run_command(*args)
    assert not AccessToken.objects.exists()
