"""A scan: secret values and tokens appear nowhere but in ciphertext (pages, frames, logs, the database)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.core import serializers

from servers.credentials.models import Credential
from servers.models import Server
from tests.conftest import free_port
from tests.helpers import logged_in
from tests.oauth_helpers import connect
from tests.test_secrets import set_secret
from tests.ws import Playground, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("worker")]

CIPHERTEXT_FIELDS = {"ciphertext", "client_secret_ciphertext", "channel_ciphertext"}


def database_text() -> str:
    """Every row of every model, ciphertext columns left out."""
    chunks = []
    for model in apps.get_models():
        rows = json.loads(serializers.serialize("json", model.objects.all()))
        for row in rows:
            for name in CIPHERTEXT_FIELDS:
                row["fields"].pop(name, None)
        chunks.append(json.dumps(rows))
    return "\n".join(chunks)


def test_secrets_never_reach_pages_frames_logs_or_rows(alice, demo_server, oauth_server, caplog):
    caplog.set_level(logging.DEBUG)
    demo_server.env = {"DEMO_KEY": "${secret:DEMO_KEY}"}
    demo_server.save()
    unreachable = Server.objects.create(
        team=demo_server.team,
        name="unreachable",
        transport="http",
        url=f"http://127.0.0.1:{free_port()}/mcp?key=${{secret:URL_KEY}}",
        request_timeout=5,
    )
    env_value, url_value = "env-secret-value-31337", "url-secret-value-27182"
    set_secret(alice, demo_server, env_value)
    client = logged_in(alice)
    client.post(f"/credentials/{unreachable.pk}/secret/", {"name": "URL_KEY", "value": url_value})
    connect(client, oauth_server.pk, "alice-at-idp")
    stored = Credential.objects.get(server=oauth_server, user=alice, kind="oauth").open_json()
    values = [env_value, url_value, stored["tokens"]["access_token"], stored["tokens"]["refresh_token"]]
    cookie = session_cookie(alice)

    async def use_everything():
        async with Playground(cookie) as ws:
            digest = await ws.call(demo_server.pk, "env_digest", {"name": "DEMO_KEY"})
            refused = await ws.call(unreachable.pk, "anything")
            whoami = await ws.call(oauth_server.pk, "whoami")
            return ws.seen, (digest, refused, whoami)

    frames, (digest, refused, whoami) = asyncio.run(use_everything())
    assert digest["status"] == "succeeded" and whoami["status"] == "succeeded"
    assert refused["status"] == "failed" and "${secret:URL_KEY}" in refused["error"], refused

    pages = [
        client.get(url).content.decode()
        for url in [
            "/credentials/",
            "/credentials/tokens/",
            "/calls/",
            f"/calls/{refused['call']}/",
            f"/servers/{unreachable.pk}/",
            "/playground/",
        ]
    ]
    logs = caplog.text
    worker_log = Path(settings.VAR_DIR) / "test-worker.log"
    if not settings.EMBEDDED and worker_log.exists():
        logs += worker_log.read_text()
    places = {
        "WebSocket frames": json.dumps(frames),
        "pages": "\n".join(pages),
        "logs": logs,
        "database": database_text(),
    }
    for where, text in places.items():
        for value in values:
            assert value not in text, f"a secret reached the {where}"
