"""The portal as the client under test of the official MCP conformance suite (`make conformance`).

Run by the suite as `python tests/conformance/client.py <server-url>` with MCP_CONFORMANCE_SCENARIO
(and sometimes MCP_CONFORMANCE_CONTEXT) set. It is not a bare SDK client: it uses the portal itself,
on a throwaway SQLite database, the way a person does:
- a user and a server registered at the scenario's URL (pre-registered client credentials go
  into the admin's OAuth settings, encrypted);
- the worker's own connection code: `sessions.credentials.prepare` (secrets, the OAuth provider
  over the encrypted Credential row) and the worker's `ConnectionPool` for listing and calling tools;
- when a server needs authorization, the "Connect your account" button and the /oauth/callback
  view, through Django's test client, with the consent page followed headlessly (the suite's
  authorization servers approve at once and redirect with a code);
- scenarios needing callbacks the pool does not offer yet (elicitation) or grants the portal has
  no UI for (client credentials, identity assertion) use the same transport and encrypted store
  under a plain `Client` or the SDK's extension providers.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
CACHE = ROOT / ".conformance"
CIMD_URL = "https://conformance-test.local/client-metadata.json"


def setup_django(work: Path) -> None:
    """A throwaway embedded-mode portal: its own var dir, key, and a copy of a migrated database."""
    for name in ("DATABASE_URL", "REDIS_URL", "PORTAL_ENCRYPTION_KEYS", "PORTAL_ENCRYPTION_KEYS_FILE"):
        os.environ.pop(name, None)
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "PORTAL_VAR_DIR": str(work),
            "PORTAL_SQLITE_PATH": str(work / "portal.sqlite3"),
            "PORTAL_TESTING": "1",
            "LOG_LEVEL": "WARNING",
        }
    )
    template = CACHE / "template.sqlite3"
    if template.exists():
        shutil.copy(template, work / "portal.sqlite3")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    if not template.exists():
        call_command("migrate", verbosity=0)
        CACHE.mkdir(exist_ok=True)
        partial = CACHE / f"template-{os.getpid()}.sqlite3"
        import sqlite3

        # The backup API, not a file copy: in WAL mode the migrated tables may still sit in the -wal file.
        with sqlite3.connect(work / "portal.sqlite3") as source, sqlite3.connect(partial) as target:
            source.backup(target)
        partial.replace(template)
    settings.CELERY_TASK_ALWAYS_EAGER = True  # "Connect" runs its task here; the flow runs on the pool loop
    from portal.celery import app

    app.conf.task_always_eager = True
    settings.ALLOWED_HOSTS = ["*"]


def build_portal(server_url: str, scenario: str, context: dict[str, Any]) -> tuple[Any, Any]:
    from django.conf import settings
    from django.contrib.auth import get_user_model

    from servers.credentials.actions import do_set_oauth_settings
    from servers.models import Membership, Server, Team

    user = get_user_model().objects.create_user("conformance", "c@example.com", "pw")
    team = Team.objects.create(name="Conformance")
    Membership.objects.create(team=team, user=user, role="admin")
    server = Server.objects.create(team=team, name="under-test", transport="http", url=server_url, request_timeout=20)
    if scenario == "auth/pre-registration":
        do_set_oauth_settings(
            server,
            {
                "client_id": context["client_id"],
                "client_secret": context["client_secret"],
                "token_endpoint_auth_method": "client_secret_basic",
            },
        )
    if scenario == "auth/basic-cimd":
        settings.PORTAL_OAUTH_CLIENT_METADATA_URL = CIMD_URL
    else:
        settings.PORTAL_OAUTH_CLIENT_METADATA_URL = ""
    return user, server


def _authorization_page(page: Any) -> str | None:
    """Where the portal sends the browser next, if it is the authorization server: a redirect (after
    the callback, for a step-up), or the page that navigates there (the answer to the Connect form)."""
    import html
    import re

    if page.status_code == 302 and not page["Location"].startswith("/"):
        return page["Location"]
    if page.status_code == 200:
        found = re.search(r'<meta http-equiv="refresh" content="0;url=([^"]+)">', page.content.decode())
        if found:
            return html.unescape(found.group(1))
    return None


def connect_account(user: Any, server: Any) -> str:
    """Press "Connect your account", let the consent page approve, come back through /oauth/callback."""
    import httpx
    from django.test import Client

    browser = Client()
    browser.force_login(user)
    page = browser.post(f"/credentials/{server.pk}/connect/", {"next": "/credentials/"})
    hops = 0
    while (authorization := _authorization_page(page)) and hops < 5:
        hops += 1
        consent = httpx.get(authorization, follow_redirects=False, timeout=20)
        if consent.status_code not in (301, 302, 303, 307, 308):
            return f"the authorization page answered {consent.status_code}"
        back = urlsplit(consent.headers["location"])
        page = browser.get(f"{back.path}?{back.query}")  # the portal's callback view
    messages = [str(m) for m in page.wsgi_request._messages] if hasattr(page, "wsgi_request") else []
    return "; ".join(messages)


def default_arguments(tool: dict[str, Any]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for name, schema in (tool.get("inputSchema") or {}).get("properties", {}).items():
        kind = schema.get("type", "string") if isinstance(schema, dict) else "string"
        arguments[name] = 1 if kind in ("number", "integer") else True if kind == "boolean" else "test"
    return arguments


def use_through_the_worker(user: Any, server: Any, scenario: str) -> int:
    """List and call tools as the worker does; connect the account whenever the server asks."""
    from sessions import credentials
    from sessions.mcp.failure import ConnectionFailed
    from sessions.mcp.pool import ConnectionPool

    pool = ConnectionPool()
    status = 0
    try:
        for attempt in range(4):  # the first try, and up to 3 authorizations (step-up included)
            server.refresh_from_db()
            prepared = credentials.prepare(server, user.pk)
            failure = prepared.failure
            if failure is None:
                try:
                    tools = pool.run(pool.list_tools(prepared.key, prepared.config), timeout=120)
                    failure = None
                    for tool in tools:
                        if scenario == "initialize":
                            break
                        outcome = pool.run(
                            pool.call_tool(prepared.key, prepared.config, tool["name"], default_arguments(tool)),
                            timeout=120,
                        )
                        print(f"{tool['name']}: {outcome.status}", flush=True)
                        if outcome.failure is not None and outcome.failure.kind in ("needs_auth", "auth_failed"):
                            failure = credentials.settle_failure(server, user.pk, prepared, outcome.failure)
                            break
                except ConnectionFailed as exc:
                    failure = credentials.settle_failure(server, user.pk, prepared, exc.failure)
            if failure is None:
                if scenario == "sse-retry":
                    import time

                    time.sleep(2)  # the suite watches the transport reconnect after the tool closed the stream
                return 0
            print(f"attempt {attempt + 1}: {failure.kind}: {failure.message}", flush=True)
            if failure.kind != "needs_auth":
                return 1
            said = connect_account(user, server)
            print(f"connect: {said}", flush=True)
            status = 1
    finally:
        pool.shutdown()
    return status


async def use_with_callbacks(user: Any, server: Any) -> int:
    """Elicitation with schema defaults: the worker's transport and credentials under a plain Client."""
    import tempfile as tf

    from asgiref.sync import sync_to_async
    from mcp import Client, types

    from sessions import credentials
    from sessions.mcp.transports import HttpTrace, open_transport

    async def on_elicit(ctx: Any, params: Any) -> types.ElicitResult:
        schema = getattr(params, "requested_schema", None) or {}
        content = {
            name: field["default"]
            for name, field in schema.get("properties", {}).items()
            if isinstance(field, dict) and "default" in field
        }
        return types.ElicitResult(action="accept", content=content)

    for _ in range(2):
        prepared = await sync_to_async(credentials.prepare)(server, user.pk)
        try:
            with tf.TemporaryFile(mode="w+") as errlog:
                async with Client(
                    open_transport(prepared.config, errlog, HttpTrace()), elicitation_callback=on_elicit
                ) as client:
                    for tool in (await client.list_tools()).tools:
                        await client.call_tool(tool.name, {})
            return 0
        except Exception as exc:  # noqa: BLE001 - a needed authorization shows up here
            failure = prepared.config.auth and prepared.config.auth.last_error
            if failure is None:
                print(f"failed: {exc!r}", flush=True)
                return 1
            await sync_to_async(connect_account)(user, server)
    return 1


async def use_extension(server: Any, scenario: str, context: dict[str, Any]) -> int:
    """Client-credentials and identity-assertion grants (SDK extension providers) over the encrypted store."""
    from mcp import Client
    from mcp.client.auth.extensions.client_credentials import (
        ClientCredentialsOAuthProvider,
        PrivateKeyJWTOAuthProvider,
        SignedJWTParameters,
    )

    from sessions.mcp.transports import HttpTrace, open_transport
    from sessions.oauth import CredentialRowStore

    store = CredentialRowStore(server.pk, team_id=server.team_id)
    if scenario == "auth/client-credentials-basic":
        provider: Any = ClientCredentialsOAuthProvider(
            server.url, store, context["client_id"], context["client_secret"], "client_secret_basic"
        )
    elif scenario == "auth/client-credentials-jwt":
        jwt = SignedJWTParameters(
            issuer=context["client_id"],
            subject=context["client_id"],
            signing_key=context["private_key_pem"],
            signing_algorithm=context.get("signing_algorithm", "ES256"),
        )
        provider = PrivateKeyJWTOAuthProvider(server.url, store, context["client_id"], jwt.create_assertion_provider())
    else:
        import httpx
        from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider

        # The MCP authorization server is configuration for this grant; the scenario's PRM names it.
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(server.url))
        prm = httpx.get(f"{origin}/.well-known/oauth-protected-resource{urlsplit(server.url).path}", timeout=20)
        if prm.status_code != 200:
            prm = httpx.get(f"{origin}/.well-known/oauth-protected-resource", timeout=20)
        issuer = prm.json()["authorization_servers"][0]

        async def id_jag(audience: str, resource: str) -> str:
            # RFC 8693 token exchange at the enterprise IdP: the user's ID token for an ID-JAG.
            async with httpx.AsyncClient(timeout=20) as http:
                answer = await http.post(
                    context["idp_token_endpoint"],
                    data={
                        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                        "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
                        "subject_token": context["idp_id_token"],
                        "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
                        "audience": audience,
                        "resource": resource,
                        "client_id": context["idp_client_id"],
                    },
                )
            answer.raise_for_status()
            return answer.json()["access_token"]

        provider = IdentityAssertionOAuthProvider(
            server.url,
            store,
            context["client_id"],
            context["client_secret"],
            issuer,
            id_jag,
            token_endpoint_auth_method="client_secret_basic",
        )
    config = server.to_config()
    import dataclasses

    config = dataclasses.replace(config, auth=provider)
    with tempfile.TemporaryFile(mode="w+") as errlog:
        async with Client(open_transport(config, errlog, HttpTrace())) as client:
            for tool in (await client.list_tools()).tools:
                await client.call_tool(tool.name, default_arguments(tool.model_dump()))
    return 0


def main() -> int:
    if sys.argv[1] == "--prepare":
        # Migrate the template database once, before the suite starts 26 drivers at the same time.
        with tempfile.TemporaryDirectory(prefix="portal-conformance-") as work:
            setup_django(Path(work))
        return 0
    server_url = sys.argv[1]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory(prefix="portal-conformance-") as work:
        setup_django(Path(work))
        user, server = build_portal(server_url, scenario, context)
        if scenario in (
            "auth/client-credentials-basic",
            "auth/client-credentials-jwt",
            "auth/cross-app-access-complete-flow",
        ):
            return asyncio.run(use_extension(server, scenario, context))
        if scenario == "elicitation-sep1034-client-defaults":
            return asyncio.run(use_with_callbacks(user, server))
        return use_through_the_worker(user, server, scenario)


if __name__ == "__main__":
    sys.exit(main())
