"""Driving the test authorization server (tests/oauth_server.py) like a person with a browser would.

Most tests drive the consent page with httpx (tests/browser/test_credentials_browser.py does it in
Chromium): the authorization URL is fetched, its form submitted, and the redirect to the portal's
callback is followed by the logged-in Django test client.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from html import unescape
from urllib.parse import urlsplit

import httpx


def approve(authorization_url: str, username: str, decision: str = "allow") -> str:
    """Consent as `username`; returns the portal callback path (with query) the server redirected to."""
    with httpx.Client(timeout=10) as http:
        page = http.get(authorization_url)
        assert page.status_code == 200, page.text
        fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page.text))
        fields = {name: unescape(value) for name, value in fields.items()}
        answer = http.post(
            str(page.url.copy_with(query=None)), data={**fields, "username": username, "decision": decision}
        )
        assert answer.status_code == 302, answer.text
    location = urlsplit(answer.headers["location"])
    return f"{location.path}?{location.query}"


def stats(base: str, token: str | None = None) -> dict[str, int]:
    """What the authorization server counted; with `token`, only the MCP requests that bore it."""
    return httpx.get(f"{base}/_stats", params={"token": token} if token else None, timeout=10).json()


def control(base: str, **changes) -> None:
    httpx.post(f"{base}/_control", json=changes, timeout=10).raise_for_status()


def authorization_url(started) -> str:
    """The authorization page a Connect answer sends the browser to.

    The answer to the Connect form is a page that navigates there itself (a meta refresh and a
    link): a form's redirect to another origin would break the CSP's form-action 'self'.
    """
    page = started.content.decode()
    assert started.status_code == 200, page
    found = re.search(r'<meta http-equiv="refresh" content="0;url=([^"]+)">', page)
    assert found, f"expected the way to the authorization page, got {page[:500]}"
    url = unescape(found.group(1))
    assert not url.startswith("/"), f"expected the authorization page, got {url}"
    return url


def connect(client, server_id: int, username: str, next_url: str = "/credentials/") -> str:
    """Press "Connect your account", consent, come back; returns where the portal sent the browser."""
    started = client.post(f"/credentials/{server_id}/connect/", {"next": next_url})
    back = client.get(approve(authorization_url(started), username))
    assert back.status_code == 302, back.content
    return back["Location"]


def expire_stored_token(credential) -> None:
    """Make the stored access token look expired to the client (the server would still take it)."""
    import json
    import time

    payload = credential.open_json()
    payload["expires_at"] = time.time() - 5
    credential.seal(json.dumps(payload))
    credential.save(update_fields=["ciphertext", "key_id"])


def worker_processes(server_id: int, user_id: int, count: int, tool: str | None = None) -> list[dict]:
    """Run `count` fresh worker processes at once against the test database; their outcomes."""
    import json
    import os
    import subprocess
    import sys

    from django.conf import settings
    from django.db import connection

    from tests.conftest import ROOT, database_url_of

    env = dict(os.environ)
    db = connection.settings_dict
    if settings.EMBEDDED:
        env["PORTAL_SQLITE_PATH"] = str(db["NAME"])
    else:
        env["DATABASE_URL"] = database_url_of(db)
    args = [sys.executable, "-m", "tests.worker_step", str(server_id), str(user_id), *([tool] if tool else [])]
    processes = [
        subprocess.Popen(args, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    for process in processes:
        assert process.stdout.readline().strip() == "ready"
    for process in processes:  # all of them go at once
        process.stdin.write("go\n")
        process.stdin.flush()
    outcomes = []
    for process in processes:
        out, _ = process.communicate(timeout=120)
        outcomes.append(json.loads(out.strip().splitlines()[-1]))
    return outcomes


@contextmanager
def https_documents(directory):
    """A real https server on 127.0.0.1 with its own certificate (written to `directory`), serving
    the JSON documents put in the yielded dict by path: (base URL, documents, certificate file)."""
    import datetime
    import http.server
    import ipaddress
    import ssl
    import threading

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
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    documents: dict[str, bytes] = {}

    class Documents(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
            body = documents.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Documents)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_port}", documents, cert_file
    finally:
        server.shutdown()
        server.server_close()
