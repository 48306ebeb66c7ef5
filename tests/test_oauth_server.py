"""The portal as the OAuth authorization server of its own MCP endpoint (sessions/oauth_server.py):
discovery, registration, the authorization code flow with PKCE, and the bearer check the endpoint
makes on every request."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import AccessToken, RefreshToken

from sessions.agent_auth import authenticate
from sessions.oauth_server import normalize_resource, oauth_clients_for

BASE = "http://testserver"
AGGREGATE = f"{BASE}/mcp/"
CALLBACK = "http://127.0.0.1:33418/callback"

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_registrations_counted():
    cache.clear()
    yield
    cache.clear()


def register(client: Client, **metadata) -> tuple[int, dict]:
    body = {"client_name": "Claude Code (portal)", "redirect_uris": [CALLBACK], **metadata}
    response = client.post("/oauth/register", json.dumps(body), content_type="application/json")
    return response.status_code, response.json()


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def authorize_params(client_id: str, challenge: str, **extra) -> dict:
    return {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": "st-1",
        "scope": "mcp",
        **extra,
    }


def consent(client: Client, params: dict) -> str:
    """GET the consent page, allow it as the logged-in person; the code the redirect carries."""
    page = client.get("/oauth/authorize", params)
    assert page.status_code == 200, page.content
    form = {field: value for field, value in page.context["form"].initial.items() if value is not None}
    form["allow"] = "Authorize"
    answer = client.post("/oauth/authorize", form)
    assert answer.status_code == 302, answer.content
    location = urlsplit(answer["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == CALLBACK
    query = parse_qs(location.query)
    assert query["state"] == ["st-1"]
    return query["code"][0]


def exchange(client: Client, **data) -> tuple[int, dict]:
    response = client.post("/oauth/token", data)
    return response.status_code, response.json()


def tokens_for(person, resource: str | None = AGGREGATE, redirect_uri: str = CALLBACK) -> tuple[str, dict]:
    """Register, log in, consent and exchange: (client_id, the token response)."""
    browser = Client()
    _, info = register(browser, redirect_uris=[redirect_uri])
    browser.login(username=person.username, password="pw-" + person.username)
    verifier, challenge = pkce()
    params = authorize_params(info["client_id"], challenge, redirect_uri=redirect_uri)
    if resource is not None:
        params["resource"] = resource
    page = browser.get("/oauth/authorize", params)
    form = {k: v for k, v in page.context["form"].initial.items() if v is not None}
    answer = browser.post("/oauth/authorize", {**form, "allow": "Authorize"})
    code = parse_qs(urlsplit(answer["Location"]).query)["code"][0]
    status, body = exchange(
        Client(),
        grant_type="authorization_code",
        code=code,
        redirect_uri=redirect_uri,
        client_id=info["client_id"],
        code_verifier=verifier,
    )
    assert status == 200, body
    return info["client_id"], body


def bearer(token: str) -> str:
    return f"Bearer {token}"


# -- metadata -------------------------------------------------------------------------------


def test_authorization_server_metadata(client):
    response = client.get("/.well-known/oauth-authorization-server")
    assert response.status_code == 200
    assert response["Access-Control-Allow-Origin"] == "*"
    doc = response.json()
    assert doc["issuer"] == BASE
    assert doc["authorization_endpoint"] == f"{BASE}/oauth/authorize"
    assert doc["token_endpoint"] == f"{BASE}/oauth/token"
    assert doc["registration_endpoint"] == f"{BASE}/oauth/register"
    assert doc["revocation_endpoint"] == f"{BASE}/oauth/revoke"
    assert doc["code_challenge_methods_supported"] == ["S256"]
    assert doc["grant_types_supported"] == ["authorization_code", "refresh_token"]
    assert doc["response_types_supported"] == ["code"]
    assert "none" in doc["token_endpoint_auth_methods_supported"]
    assert doc["scopes_supported"] == ["mcp"]


def test_protected_resource_metadata_for_the_aggregate_and_one_server(client):
    for path, resource in (
        ("/mcp", AGGREGATE),
        ("/mcp/", AGGREGATE),
        ("/mcp/demo", f"{BASE}/mcp/demo/"),
        ("/mcp/demo/", f"{BASE}/mcp/demo/"),
    ):
        response = client.get(f"/.well-known/oauth-protected-resource{path}")
        assert response.status_code == 200
        assert response["Access-Control-Allow-Origin"] == "*"
        doc = response.json()
        assert doc["resource"] == resource
        assert doc["authorization_servers"] == [BASE]
        assert doc["scopes_supported"] == ["mcp"]
        assert doc["bearer_methods_supported"] == ["header"]


def test_the_origin_itself_is_no_resource(client):
    assert client.get("/.well-known/oauth-protected-resource").status_code == 404
    assert client.get("/.well-known/oauth-protected-resource/mcp/a/b").status_code == 404


def test_browser_based_clients_may_call_from_another_origin(client):
    for path in ("/.well-known/oauth-authorization-server", "/oauth/register", "/oauth/token", "/oauth/revoke"):
        preflight = client.options(path, HTTP_ORIGIN="http://localhost:6274", HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST")
        assert preflight.status_code == 204, path
        assert preflight["Access-Control-Allow-Origin"] == "*"
        assert "Content-Type" in preflight["Access-Control-Allow-Headers"]
    status, _ = register(client)
    assert status == 201
    response = client.post("/oauth/token", {"grant_type": "authorization_code", "code": "x", "client_id": "y"})
    assert response.status_code in (400, 401)
    assert response["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in response


def test_the_challenge_names_the_metadata_the_portal_serves(client):
    from sessions.agent_auth import challenge

    header = challenge(BASE, "/mcp/demo/")
    url = header.split('resource_metadata="', 1)[1].rstrip('"')
    assert client.get(url.removeprefix(BASE)).json()["resource"] == f"{BASE}/mcp/demo/"


# -- dynamic client registration ------------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    [
        "https://client.example.com/cb",
        "http://127.0.0.1:33418/callback",
        "http://localhost:6274/oauth/callback",
        "http://[::1]:8080/cb",
        "http://127.0.0.1/cb",
    ],
)
def test_it_registers_a_public_client(client, uri):
    status, info = register(client, redirect_uris=[uri], token_endpoint_auth_method="none")
    assert status == 201, info
    assert info["client_id"]
    assert "client_secret" not in info
    assert info["redirect_uris"] == [uri]
    assert info["token_endpoint_auth_method"] == "none"
    assert info["grant_types"] == ["authorization_code", "refresh_token"]
    assert info["client_name"] == "Claude Code (portal)"


@pytest.mark.parametrize(
    ("metadata", "error"),
    [
        ({"redirect_uris": ["javascript:alert(1)"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["http://evil.example.com/cb"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["http://127.0.0.1.evil.example.com/cb"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://client.example.com/cb#frag"]}, "invalid_redirect_uri"),
        ({"redirect_uris": ["https://user@client.example.com/cb"]}, "invalid_redirect_uri"),
        ({"redirect_uris": []}, "invalid_redirect_uri"),
        ({"redirect_uris": [f"https://c.example.com/{n}" for n in range(11)]}, "invalid_redirect_uri"),
        ({"client_name": "x" * 201}, "invalid_client_metadata"),
        ({"grant_types": ["client_credentials"]}, "invalid_client_metadata"),
        ({"response_types": ["token"]}, "invalid_client_metadata"),
        ({"scope": "admin"}, "invalid_client_metadata"),
    ],
)
def test_it_refuses_bad_registrations(client, metadata, error):
    status, body = register(client, **metadata)
    assert status == 400
    assert body["error"] == error
    assert body["error_description"]


def test_it_refuses_a_body_that_is_not_json(client):
    response = client.post("/oauth/register", "not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_client_metadata"


def test_registration_is_limited_per_address(client, settings):
    settings.PORTAL_OAUTH_REGISTRATIONS_PER_MINUTE = 3
    statuses = [register(client)[0] for _ in range(4)]
    assert statuses == [201, 201, 201, 429]
    other = Client(REMOTE_ADDR="10.0.0.9")
    assert register(other)[0] == 201


# -- the flow -------------------------------------------------------------------------------


def test_authorize_sends_a_stranger_to_the_portals_login_page(client):
    _, info = register(client)
    _, challenge = pkce()
    response = client.get("/oauth/authorize", authorize_params(info["client_id"], challenge))
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=/oauth/authorize")


def test_the_full_flow_with_pkce_and_refresh(client, bob):
    _, info = register(client, redirect_uris=["http://127.0.0.1:5000/callback"])
    client.login(username="bob", password="pw-bob")
    verifier, challenge = pkce()
    # Registered on port 5000, asked back on another: a loopback redirect may use any port.
    params = authorize_params(info["client_id"], challenge, resource=f"{BASE}/mcp/demo")
    page = client.get("/oauth/authorize", params)
    assert page.status_code == 200
    text = page.content.decode()
    assert "Claude Code (portal)" in text
    assert "demo" in text and "127.0.0.1:33418" in text
    code = consent(client, params)

    wrong, body = exchange(
        Client(),
        grant_type="authorization_code",
        code=code,
        redirect_uri=CALLBACK,
        client_id=info["client_id"],
        code_verifier=secrets.token_urlsafe(48),
    )
    assert wrong == 400 and body["error"] == "invalid_grant"

    code = consent(client, params)
    # A resource at the token endpoint may narrow the grant's, never widen it.
    widened, body = exchange(
        Client(),
        grant_type="authorization_code",
        code=code,
        redirect_uri=CALLBACK,
        client_id=info["client_id"],
        code_verifier=verifier,
        resource=AGGREGATE,
    )
    assert widened == 400 and body["error"] == "invalid_target"

    code = consent(client, params)
    status, tokens = exchange(
        Client(),
        grant_type="authorization_code",
        code=code,
        redirect_uri=CALLBACK,
        client_id=info["client_id"],
        code_verifier=verifier,
        resource=f"{BASE}/mcp/demo",  # the same endpoint, without its slash
    )
    assert status == 200, tokens
    assert tokens["token_type"] == "Bearer"
    assert tokens["scope"] == "mcp"
    assert 3500 <= tokens["expires_in"] <= 3600
    agent = authenticate(bearer(tokens["access_token"]), f"{BASE}/mcp/demo/")
    assert agent is not None and agent.user == bob
    assert agent.credential.startswith("oauth:") and agent.token is None and agent.servers is None
    assert agent.scopes == ["mcp"]
    # Only digests are kept.
    assert not AccessToken.objects.filter(token=tokens["access_token"]).exists()

    status, renewed = exchange(
        Client(), grant_type="refresh_token", refresh_token=tokens["refresh_token"], client_id=info["client_id"]
    )
    assert status == 200, renewed
    assert renewed["refresh_token"] != tokens["refresh_token"]
    # The renewed token keeps its endpoint and its credential (a handshake-era session bound to it
    # goes on across the refresh), and the old one is gone.
    renewed_agent = authenticate(bearer(renewed["access_token"]), f"{BASE}/mcp/demo/")
    assert renewed_agent is not None and renewed_agent.credential == agent.credential
    assert authenticate(bearer(renewed["access_token"]), AGGREGATE) is None
    assert authenticate(bearer(tokens["access_token"]), f"{BASE}/mcp/demo/") is None
    # The rotated refresh token cannot be used again, and trying revokes what came from it.
    again, _ = exchange(
        Client(), grant_type="refresh_token", refresh_token=tokens["refresh_token"], client_id=info["client_id"]
    )
    assert again == 400
    assert authenticate(bearer(renewed["access_token"]), f"{BASE}/mcp/demo/") is None
    later, _ = exchange(
        Client(), grant_type="refresh_token", refresh_token=renewed["refresh_token"], client_id=info["client_id"]
    )
    assert later == 400


def test_plain_pkce_is_refused(client, bob):
    _, info = register(client)
    client.login(username="bob", password="pw-bob")
    verifier = secrets.token_urlsafe(48)
    params = authorize_params(info["client_id"], verifier, code_challenge_method="plain")
    response = client.get("/oauth/authorize", params)
    assert response.status_code in (302, 400)
    if response.status_code == 302:
        query = parse_qs(urlsplit(response["Location"]).query)
        assert "code" not in query and query["error"]
    assert not AccessToken.objects.exists()


def test_missing_pkce_is_refused(client, bob):
    _, info = register(client)
    client.login(username="bob", password="pw-bob")
    params = authorize_params(info["client_id"], "")
    del params["code_challenge"], params["code_challenge_method"]
    response = client.get("/oauth/authorize", params)
    assert response.status_code in (302, 400)
    if response.status_code == 302:
        query = parse_qs(urlsplit(response["Location"]).query)
        assert "code" not in query and query["error"] == ["invalid_request"]


def test_an_unregistered_redirect_is_refused(client, bob):
    _, info = register(client)
    client.login(username="bob", password="pw-bob")
    _, challenge = pkce()
    params = authorize_params(info["client_id"], challenge, redirect_uri="https://evil.example.com/cb")
    response = client.get("/oauth/authorize", params)
    assert response.status_code == 400
    assert "evil.example.com" not in response.get("Location", "")


def test_a_resource_that_is_not_the_portals_endpoint_is_refused(client, bob):
    _, info = register(client)
    client.login(username="bob", password="pw-bob")
    _, challenge = pkce()
    for resource in ("https://elsewhere.example.com/mcp/", f"{BASE}/admin/", f"{BASE}/mcp/a/b/"):
        response = client.get("/oauth/authorize", authorize_params(info["client_id"], challenge, resource=resource))
        assert response.status_code == 400, resource
    two = {**authorize_params(info["client_id"], challenge), "resource": [AGGREGATE, f"{BASE}/mcp/a/"]}
    assert client.get("/oauth/authorize", two).status_code == 400


def test_a_tampered_resource_in_the_consent_form_is_refused(client, bob):
    _, info = register(client)
    client.login(username="bob", password="pw-bob")
    _, challenge = pkce()
    page = client.get("/oauth/authorize", authorize_params(info["client_id"], challenge))
    form = {k: v for k, v in page.context["form"].initial.items() if v is not None}
    form.update(allow="Authorize", resource="https://elsewhere.example.com/")
    assert client.post("/oauth/authorize", form).status_code == 400
    form.update(resource=AGGREGATE, code_challenge_method="plain")
    assert client.post("/oauth/authorize", form).status_code == 400
    assert not AccessToken.objects.exists()


# -- the endpoint's check -------------------------------------------------------------------


def test_no_resource_means_the_aggregate_endpoint(bob):
    _, tokens = tokens_for(bob, resource=None)
    assert authenticate(bearer(tokens["access_token"]), AGGREGATE).user == bob
    assert authenticate(bearer(tokens["access_token"]), f"{BASE}/mcp") is not None
    assert authenticate(bearer(tokens["access_token"]), f"{BASE}/mcp/demo/") is None


def test_a_token_is_good_only_at_its_endpoint(bob):
    _, tokens = tokens_for(bob, resource=f"{BASE}/mcp/a/")
    token = bearer(tokens["access_token"])
    assert authenticate(token, f"{BASE}/mcp/a/") is not None
    assert authenticate(token, f"{BASE}/mcp/b/") is None
    assert authenticate(token, AGGREGATE) is None
    assert authenticate(token, "http://other.example.com/mcp/a/") is None
    assert authenticate("Bearer nonsense", AGGREGATE) is None
    assert authenticate(tokens["access_token"], f"{BASE}/mcp/a/") is None  # no "Bearer"


def test_a_token_revoked_at_the_revoke_endpoint_is_refused(bob):
    client_id, tokens = tokens_for(bob)
    response = Client().post("/oauth/revoke", {"token": tokens["access_token"], "client_id": client_id})
    assert response.status_code == 200
    assert authenticate(bearer(tokens["access_token"]), AGGREGATE) is None


def test_revoking_the_client_refuses_its_tokens_and_its_refresh(client, bob, alice):
    client_id, tokens = tokens_for(bob)
    _, alices = tokens_for(alice)
    [listed] = oauth_clients_for(bob)
    assert listed.name == "Claude Code (portal)" and listed.endpoints == [AGGREGATE]
    # Alice cannot revoke Bob's client.
    client.login(username="alice", password="pw-alice")
    client.post(f"/agents/oauth/{listed.id}/revoke")
    assert authenticate(bearer(tokens["access_token"]), AGGREGATE) is not None
    client.login(username="bob", password="pw-bob")
    response = client.post(f"/agents/oauth/{listed.id}/revoke")
    assert response.status_code == 302
    assert authenticate(bearer(tokens["access_token"]), AGGREGATE) is None
    status, _ = exchange(
        Client(), grant_type="refresh_token", refresh_token=tokens["refresh_token"], client_id=client_id
    )
    assert status == 400
    assert oauth_clients_for(bob) == []
    assert authenticate(bearer(alices["access_token"]), AGGREGATE).user == alice


def test_an_expired_token_is_refused(bob):
    _, tokens = tokens_for(bob)
    AccessToken.objects.update(expires=timezone.now() - timedelta(seconds=1))
    assert authenticate(bearer(tokens["access_token"]), AGGREGATE) is None


def test_a_deactivated_persons_token_is_refused(bob):
    _, tokens = tokens_for(bob)
    bob.is_active = False
    bob.save()
    assert authenticate(bearer(tokens["access_token"]), AGGREGATE) is None


def test_a_token_without_the_mcp_scope_is_refused(bob):
    _, tokens = tokens_for(bob)
    AccessToken.objects.update(scope="read")
    assert authenticate(bearer(tokens["access_token"]), AGGREGATE) is None


def test_personal_access_tokens_still_work(bob):
    from sessions.access_tokens import do_create_token

    _, text = do_create_token(bob, "laptop")
    assert authenticate(bearer(text), AGGREGATE).credential.startswith("pat:")


def test_the_clients_list_page_partial_names_no_token(client, bob):
    from django.template.loader import render_to_string

    _, tokens = tokens_for(bob)
    html = render_to_string("sessions/_oauth_clients.html", {"oauth_clients": oauth_clients_for(bob)})
    assert "Claude Code (portal)" in html and "Revoke" in html
    assert tokens["access_token"] not in html and tokens["refresh_token"] not in html
    assert RefreshToken.objects.count() == 1


@pytest.mark.parametrize(
    ("url", "normal"),
    [
        ("http://Host:80/mcp", "http://host/mcp/"),
        ("https://host:443/mcp/demo//", "https://host/mcp/demo/"),
        ("http://127.0.0.1:8000/mcp/?x=1#f", "http://127.0.0.1:8000/mcp/"),
        ("http://[::1]:8000/mcp", "http://[::1]:8000/mcp/"),
        ("not a url", ""),
    ],
)
def test_resources_are_compared_normalized(url, normal):
    assert normalize_resource(url) == normal


def test_the_consent_page_may_send_its_form_only_back_to_the_client(client, bob):
    _, info = register(client)
    client.login(username="bob", password="pw-bob")
    _, challenge = pkce()
    page = client.get("/oauth/authorize", authorize_params(info["client_id"], challenge))
    assert "form-action 'self' http://127.0.0.1:33418;" in page["Content-Security-Policy"]
    assert "form-action 'self';" in client.get("/accounts/password/change/")["Content-Security-Policy"]


def test_deny_sends_the_client_away_without_a_code(client, bob):
    _, info = register(client)
    client.login(username="bob", password="pw-bob")
    _, challenge = pkce()
    page = client.get("/oauth/authorize", authorize_params(info["client_id"], challenge))
    form = {k: v for k, v in page.context["form"].initial.items() if v is not None}
    answer = client.post("/oauth/authorize", form)
    assert answer.status_code == 302
    query = parse_qs(urlsplit(answer["Location"]).query)
    assert query["error"] == ["access_denied"] and "code" not in query
    assert not AccessToken.objects.exists()


# -- client ID metadata documents -----------------------------------------------------------


@pytest.fixture
def document_server(tmp_path, settings):
    """A real https server on 127.0.0.1 (its own certificate, trusted through the setting) that
    serves whatever client ID metadata document a test publishes."""
    from tests.oauth_helpers import https_documents

    with https_documents(tmp_path) as (base, documents, cert_file):
        settings.PORTAL_OAUTH_CIMD_CA_FILE = str(cert_file)

        def publish(path: str, **metadata) -> str:
            client_id = base + path
            documents[path] = json.dumps({"client_id": client_id, **metadata}).encode()
            return client_id

        yield publish


def test_a_client_id_metadata_document_is_read_and_used(client, bob, document_server):
    client_id = document_server("/client.json", client_name="Doc Client", redirect_uris=[CALLBACK])
    client.login(username="bob", password="pw-bob")
    verifier, challenge = pkce()
    params = authorize_params(client_id, challenge)
    page = client.get("/oauth/authorize", params)
    assert page.status_code == 200, page.content
    text = page.content.decode()
    assert "Let Doc Client act as you?" in text
    assert f"describes itself at <strong>{urlsplit(client_id).netloc}</strong>" in text
    code = consent(client, params)
    status, tokens = exchange(
        Client(),
        grant_type="authorization_code",
        code=code,
        redirect_uri=CALLBACK,
        client_id=client_id,
        code_verifier=verifier,
    )
    assert status == 200, tokens
    assert authenticate(bearer(tokens["access_token"]), AGGREGATE).user == bob


def test_a_client_id_metadata_document_is_held_to_the_registration_rules(client, bob, document_server):
    client_id = document_server("/evil.json", client_name="Evil", redirect_uris=["http://evil.example.com/cb"])
    client.login(username="bob", password="pw-bob")
    _, challenge = pkce()
    params = authorize_params(client_id, challenge, redirect_uri="http://evil.example.com/cb")
    assert client.get("/oauth/authorize", params).status_code == 400
    # A document that names another client_id than its URL is not believed either.
    liar = document_server("/liar.json", client_id="https://claude.ai/client.json", redirect_uris=[CALLBACK])
    assert client.get("/oauth/authorize", authorize_params(liar, challenge)).status_code == 400
    missing = urlsplit(client_id)._replace(path="/nothing.json").geturl()
    assert client.get("/oauth/authorize", authorize_params(missing, challenge)).status_code == 400


def test_a_client_id_metadata_document_is_read_only_where_the_outbound_policy_allows(
    client, bob, document_server, settings
):
    client_id = document_server("/client.json", client_name="Doc Client", redirect_uris=[CALLBACK])
    settings.PORTAL_ALLOW_PRIVATE_NETWORK = False
    client.login(username="bob", password="pw-bob")
    _, challenge = pkce()
    assert client.get("/oauth/authorize", authorize_params(client_id, challenge)).status_code == 400
