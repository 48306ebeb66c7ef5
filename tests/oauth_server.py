"""A real OAuth 2.1 authorization server protecting a Streamable HTTP MCP server, for the tests.

Run: python -m tests.oauth_server --port N [--expires-in S]. One process serves:
- RFC 9728 protected-resource metadata for /mcp and RFC 8414 metadata at the root;
- RFC 7591 registration, /authorize (a consent form: who are you, Allow), /token with PKCE S256,
  refresh tokens that rotate (a reused one is refused, as strict servers do), RFC 9207 iss;
- /mcp: tools `whoami` (the user the token was issued to) and `admin_op` (needs scope "admin":
  403 insufficient_scope, for step-up); 401 with WWW-Authenticate without a valid token;
- /_stats (requests seen by kind) and /_control (expiry, refresh errors, refresh delay, an error
  answered on the callback instead of a code, forgetting every registered client).
State is in memory; the tests restart nothing here.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import html
import secrets
import time
from collections import Counter
from typing import Any
from urllib.parse import urlencode

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

STATE: dict[str, Any] = {
    "clients": {},
    "codes": {},
    "access": {},  # token -> {user, scope, expires}
    "refresh": {},  # token -> {user, scope, client_id}
    "stats": Counter(),
    # Requests let in, by the access token they bore: other tests' connections still hold tokens of
    # their own, so a test asks after its own token's (`/_stats?token=`).
    "used": Counter(),
    "control": {
        "expires_in": 3600,
        "refresh_error": None,
        "refresh_status": 400,
        "refresh_delay": 0.0,
        "authorize_error": None,  # sent back on the callback instead of a code, after consent
        "authorize_error_description": None,
    },
}
BASE = ""

mcp = MCPServer(name="oauth-protected", version="1.0.0")


def _token_of(ctx: Context) -> dict[str, Any]:
    request = ctx.request_context.request
    token = request.headers.get("authorization", "")[7:] if request is not None else ""
    return STATE["access"].get(token, {})


# Both tools only read, and say so: these tests are about tokens, not approvals.
@mcp.tool(description="Who the access token belongs to.", annotations=ToolAnnotations(readOnlyHint=True))
def whoami(ctx: Context) -> str:
    return _token_of(ctx).get("user", "?")


@mcp.tool(description="Needs the admin scope.", annotations=ToolAnnotations(readOnlyHint=True))
def admin_op(ctx: Context) -> str:
    return f"admin done for {_token_of(ctx).get('user', '?')}"


def as_metadata() -> dict[str, Any]:
    return {
        "issuer": BASE,
        "authorization_endpoint": f"{BASE}/authorize",
        "token_endpoint": f"{BASE}/token",
        "registration_endpoint": f"{BASE}/register",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["client_secret_post", "client_secret_basic", "none"],
        "scopes_supported": ["read", "admin"],
        "authorization_response_iss_parameter_supported": True,
    }


async def prm(request: Request) -> Response:
    return JSONResponse({"resource": f"{BASE}/mcp", "authorization_servers": [BASE], "scopes_supported": ["read"]})


async def asm(request: Request) -> Response:
    return JSONResponse(as_metadata())


async def register(request: Request) -> Response:
    STATE["stats"]["register"] += 1
    body = await request.json()
    client_id = "c-" + secrets.token_hex(6)
    method = body.get("token_endpoint_auth_method") or "client_secret_post"
    client = {
        "client_id": client_id,
        "client_secret": secrets.token_urlsafe(16) if method != "none" else None,
        "redirect_uris": body.get("redirect_uris", []),
        "token_endpoint_auth_method": method,
        "grant_types": body.get("grant_types", ["authorization_code", "refresh_token"]),
    }
    STATE["clients"][client_id] = client
    return JSONResponse({k: v for k, v in client.items() if v is not None}, status_code=201)


async def authorize(request: Request) -> Response:
    params = dict(request.query_params) if request.method == "GET" else dict(await request.form())
    client = STATE["clients"].get(params.get("client_id", ""))
    if client is None or params.get("redirect_uri") not in client["redirect_uris"]:
        return Response("unknown client or redirect_uri", status_code=400)
    if params.get("code_challenge_method") != "S256" or not params.get("code_challenge") or not params.get("state"):
        return Response("PKCE S256 and state are required", status_code=400)
    if request.method == "GET":
        STATE["stats"]["authorize"] += 1
        hidden = "".join(
            f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in params.items()
        )
        return HTMLResponse(
            f"<html><body><h1>Authorize MCP Portal?</h1><p>Scopes: {html.escape(params.get('scope', ''))}</p>"
            f'<form method="post" action="/authorize">{hidden}'
            '<label>Your name <input name="username" value="user"></label>'
            '<button type="submit" name="decision" value="allow">Allow</button>'
            '<button type="submit" name="decision" value="deny">Deny</button></form></body></html>'
        )
    target = params["redirect_uri"]
    refused = STATE["control"]["authorize_error"]
    if params.get("decision") != "allow" or refused:
        query = {"error": refused or "access_denied", "state": params["state"], "iss": BASE}
        if STATE["control"]["authorize_error_description"]:
            query["error_description"] = STATE["control"]["authorize_error_description"]
        return RedirectResponse(f"{target}?{urlencode(query)}", status_code=302)
    code = secrets.token_urlsafe(16)
    STATE["codes"][code] = {
        "client_id": params["client_id"],
        "redirect_uri": target,
        "challenge": params["code_challenge"],
        "scope": params.get("scope", "read"),
        "user": params.get("username", "user"),
        "resource": params.get("resource"),
    }
    return RedirectResponse(f"{target}?{urlencode({'code': code, 'state': params['state'], 'iss': BASE})}", 302)


def _client_auth(request: Request, form: dict[str, str]) -> dict[str, Any] | None:
    header = request.headers.get("authorization", "")
    if header.startswith("Basic "):
        client_id, _, secret = base64.b64decode(header[6:]).decode().partition(":")
    else:
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
    client = STATE["clients"].get(client_id)
    if client is None or (client["client_secret"] and client["client_secret"] != secret):
        return None
    return client


def _issue(user: str, scope: str, client_id: str) -> dict[str, Any]:
    access, refresh = "at-" + secrets.token_urlsafe(24), "rt-" + secrets.token_urlsafe(24)
    expires_in = STATE["control"]["expires_in"]
    STATE["access"][access] = {"user": user, "scope": scope, "expires": time.time() + expires_in}
    STATE["refresh"][refresh] = {"user": user, "scope": scope, "client_id": client_id}
    return {
        "access_token": access,
        "token_type": "Bearer",
        "expires_in": expires_in,
        "refresh_token": refresh,
        "scope": scope,
    }


async def token(request: Request) -> Response:
    form = {k: str(v) for k, v in (await request.form()).items()}
    client = _client_auth(request, form)
    if client is None:
        return JSONResponse({"error": "invalid_client"}, status_code=401)
    grant = form.get("grant_type")
    if grant == "authorization_code":
        STATE["stats"]["token_code"] += 1
        code = STATE["codes"].pop(form.get("code", ""), None)
        verifier = form.get("code_verifier", "")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
        if code is None or code["client_id"] != client["client_id"] or code["challenge"] != challenge:
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        return JSONResponse(_issue(code["user"], code["scope"], client["client_id"]))
    if grant == "refresh_token":
        STATE["stats"]["token_refresh"] += 1
        control = STATE["control"]
        if control["refresh_delay"]:
            await asyncio.sleep(control["refresh_delay"])  # widens the window two refreshes could race in
        if control["refresh_error"]:
            return JSONResponse({"error": control["refresh_error"]}, status_code=control["refresh_status"])
        old = STATE["refresh"].pop(form.get("refresh_token", ""), None)  # rotation: each one works once
        if old is None or old["client_id"] != client["client_id"]:
            STATE["stats"]["refresh_refused"] += 1
            return JSONResponse({"error": "invalid_grant"}, status_code=400)
        return JSONResponse(_issue(old["user"], old["scope"], client["client_id"]))
    return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)


async def stats(request: Request) -> Response:
    token = request.query_params.get("token")
    if token is not None:
        return JSONResponse({"mcp_ok": STATE["used"][token]})
    return JSONResponse(dict(STATE["stats"]))


async def control(request: Request) -> Response:
    changes = await request.json()
    if changes.pop("forget_clients", False):  # as a server that lost its registrations would
        STATE["clients"].clear()
    STATE["control"].update(changes)
    return JSONResponse(STATE["control"])


class BearerGate:
    """401 without a valid token; 403 insufficient_scope when calling admin_op without "admin"."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/mcp"):
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"").decode()
        grant = STATE["access"].get(auth[7:]) if auth.startswith("Bearer ") else None
        challenge = f'Bearer resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp", scope="read"'
        if grant is None or grant["expires"] < time.time():
            STATE["stats"]["mcp_401"] += 1
            return await Response("unauthorized", 401, headers={"WWW-Authenticate": challenge})(scope, receive, send)
        STATE["stats"]["mcp_ok"] += 1
        STATE["used"][auth[7:]] += 1
        chunks = []
        more = True
        while more and scope["method"] == "POST":
            message = await receive()
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if b'"admin_op"' in body and "admin" not in grant["scope"].split():
            step_up = f'Bearer error="insufficient_scope", scope="read admin", resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp"'
            return await Response("insufficient scope", 403, headers={"WWW-Authenticate": step_up})(
                scope, receive, send
            )
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay if scope["method"] == "POST" else receive, send)


def build_app() -> Any:
    app = mcp.streamable_http_app()
    app.router.routes.extend(
        [
            Route("/.well-known/oauth-protected-resource/mcp", prm),
            Route("/.well-known/oauth-authorization-server", asm),
            Route("/register", register, methods=["POST"]),
            Route("/authorize", authorize, methods=["GET", "POST"]),
            Route("/token", token, methods=["POST"]),
            Route("/_stats", stats),
            Route("/_control", control, methods=["POST"]),
        ]
    )
    return BearerGate(app)


def main() -> None:
    global BASE
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--expires-in", type=int, default=3600)
    args = parser.parse_args()
    BASE = f"http://127.0.0.1:{args.port}"
    STATE["control"]["expires_in"] = args.expires_in
    uvicorn.run(build_app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
