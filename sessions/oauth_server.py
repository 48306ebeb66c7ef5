"""The portal as the OAuth 2.1 authorization server of its own MCP endpoint (docs/mcp-endpoint.md).

django-oauth-toolkit does the protocol (authorize, token, revoke; PKCE; refresh rotation; digests of
tokens at rest); this module holds what is the portal's own: the metadata documents clients discover
it by, dynamic client registration for public clients, the rule that every token is bound to one
endpoint of this portal (RFC 8707), the check of a bearer token for the endpoint, and a person's list
of the clients they let in, each revocable at once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from oauth2_provider import cimd
from oauth2_provider.models import AccessToken, Application, Grant, RefreshToken
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import AuthorizationView, TokenView

from portal.middleware import content_security_policy_with_form_action
from servers.outbound import network_policy

from .access_tokens import Agent
from .mcp.fetch import FetchRefused, fetch_json

log = logging.getLogger(__name__)

SCOPE = "mcp"
ENDPOINT_PATH = "/mcp/"
MAX_REDIRECT_URIS = 10
MAX_CLIENT_NAME = 200
MAX_REGISTRATION_BYTES = 16 * 1024
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
AGENTS_PAGE = "/agents/"


# -- the endpoint as a resource ------------------------------------------------------------


def base_url(request: HttpRequest) -> str:
    """The portal's address as this request reached it, without a path: the issuer and the
    resource server are one origin."""
    return f"{request.scheme}://{request.get_host()}"


def normalize_resource(url: str) -> str:
    """A resource indicator in the one form tokens are bound to and compared in: lower-case scheme
    and host, no default port, the path with one trailing slash, no query or fragment."""
    parts = urlsplit((url or "").strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if not scheme or not host:
        return ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        return ""
    if port and port != {"http": 80, "https": 443}.get(scheme):
        host = f"{host}:{port}"
    path = "/" + parts.path.strip("/")
    return f"{scheme}://{host}{path.rstrip('/')}/"


def endpoint_resource(base: str, requested: str | None) -> str:
    """The endpoint of this portal a client asks a token for, normalized: the aggregate `/mcp/` when
    it names none, `/mcp/<server>/` for one server; "" when it names anything else."""
    resource = normalize_resource(requested or f"{base}{ENDPOINT_PATH}")
    prefix = normalize_resource(f"{base}{ENDPOINT_PATH}")
    if not resource.startswith(prefix):
        return ""
    rest = resource[len(prefix) :]
    return resource if rest == "" or rest.count("/") == 1 else ""


def endpoint_server(resource: str) -> str:
    """The server a resource names ("" for the aggregate endpoint)."""
    path = urlsplit(resource).path
    return path[len(ENDPOINT_PATH) :].strip("/")


# -- metadata (RFC 8414, RFC 9728) ---------------------------------------------------------


def open_to_browsers(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """CORS for the endpoints a browser-based MCP client (the MCP Inspector, a web agent) calls from
    its own origin: metadata, registration, token and revoke. Any origin, never with cookies: none
    of them acts on a session, so another origin gains nothing a script without the page has not."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method == "OPTIONS":
            response = HttpResponse(status=204)
            response["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
            response["Access-Control-Allow-Headers"] = "Content-Type, Authorization, MCP-Protocol-Version"
            response["Access-Control-Max-Age"] = "86400"
        else:
            response = view(request, *args, **kwargs)
        response["Access-Control-Allow-Origin"] = "*"
        return response

    return csrf_exempt(wrapped)


def _public_json(data: dict[str, Any], status: int = 200) -> JsonResponse:
    response = JsonResponse(data, status=status)
    response["Cache-Control"] = "max-age=300" if status == 200 else "no-store"
    return response


@open_to_browsers
@require_GET
def authorization_server_metadata(request: HttpRequest) -> JsonResponse:
    base = base_url(request)
    return _public_json(
        {
            "issuer": base,
            "authorization_endpoint": base + reverse("oauth_authorize"),
            "token_endpoint": base + reverse("oauth_token"),
            "registration_endpoint": base + reverse("oauth_register"),
            "revocation_endpoint": base + reverse("oauth_revoke"),
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["none"],
            "revocation_endpoint_auth_methods_supported": ["none"],
            "scopes_supported": [SCOPE],
            "client_id_metadata_document_supported": bool(oauth2_settings.CIMD_ENABLED),
        }
    )


@open_to_browsers
@require_GET
def protected_resource_metadata(request: HttpRequest, server: str = "") -> JsonResponse:
    base = base_url(request)
    resource = endpoint_resource(base, f"{base}{ENDPOINT_PATH}{server + '/' if server else ''}")
    if not resource:
        return _public_json({"error": "not_found"}, status=404)
    return _public_json(
        {
            "resource": resource,
            "authorization_servers": [base],
            "scopes_supported": [SCOPE],
            "bearer_methods_supported": ["header"],
            "resource_name": f"MCP Portal: {server}" if server else "MCP Portal",
        }
    )


# -- dynamic client registration (RFC 7591) ------------------------------------------------


class RegistrationRefused(Exception):
    def __init__(self, error: str, description: str):
        super().__init__(description)
        self.error = error
        self.description = description


def redirect_uri_error(uri: Any) -> str:
    """Why a client may not register this redirect URI, or "": https anywhere, or plain http only
    back to the person's own machine (a native client's loopback listener, RFC 8252 §7.3)."""
    if not isinstance(uri, str) or not uri or len(uri) > 2000:
        return "a redirect URI is a URL of at most 2000 characters"
    try:
        parts = urlsplit(uri)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return f"{uri!r} is not a URL"
    if parts.fragment or "#" in uri:
        return f"{uri!r} has a fragment"
    if not parts.hostname or parts.username is not None or parts.password is not None:
        return f"{uri!r} needs a host and no user name"
    if parts.scheme == "https":
        return ""
    if parts.scheme == "http" and parts.hostname in LOOPBACK_HOSTS:
        return ""
    return f"{uri!r} is neither https nor http to 127.0.0.1, localhost or [::1]"


def checked_metadata(metadata: Any) -> tuple[str, list[str]]:
    """A client's name and redirect URIs from its metadata (a registration or a client ID metadata
    document), or RegistrationRefused saying what is wrong."""
    if not isinstance(metadata, dict):
        raise RegistrationRefused("invalid_client_metadata", "The body is a JSON object.")
    uris = metadata.get("redirect_uris")
    if not isinstance(uris, list) or not uris:
        raise RegistrationRefused("invalid_redirect_uri", "redirect_uris is a list of at least one URL.")
    if len(uris) > MAX_REDIRECT_URIS:
        raise RegistrationRefused("invalid_redirect_uri", f"At most {MAX_REDIRECT_URIS} redirect URIs.")
    for uri in uris:
        reason = redirect_uri_error(uri)
        if reason:
            raise RegistrationRefused("invalid_redirect_uri", reason)
    name = metadata.get("client_name", "")
    if not isinstance(name, str) or len(name) > MAX_CLIENT_NAME:
        raise RegistrationRefused("invalid_client_metadata", f"client_name is text of at most {MAX_CLIENT_NAME}.")
    for key, allowed in (("grant_types", {"authorization_code", "refresh_token"}), ("response_types", {"code"})):
        value = metadata.get(key)
        if value is not None and (not isinstance(value, list) or not set(value) <= allowed):
            raise RegistrationRefused("invalid_client_metadata", f"{key} may only be {sorted(allowed)}.")
    scope = metadata.get("scope")
    if scope is not None and (not isinstance(scope, str) or set(scope.split()) - {SCOPE}):
        raise RegistrationRefused("invalid_client_metadata", f"The only scope is {SCOPE!r}.")
    return name.strip(), list(dict.fromkeys(uris))


def take_registration(address: str, now: float | None = None) -> float:
    """Count one registration from `address`; the seconds to wait when over the limit, else 0.
    Registration is open to anyone who reaches the portal, so it is bounded per address."""
    limit = settings.PORTAL_OAUTH_REGISTRATIONS_PER_MINUTE
    if limit <= 0:
        return 0
    now = time.time() if now is None else now
    key = f"portal:oauth-register:{address}:{int(now // 60)}"
    try:
        if not cache.add(key, 1, timeout=65):
            if cache.incr(key) > limit:
                return max(1, math.ceil(60 - now % 60))
    except Exception:  # noqa: BLE001 - an unreachable cache lets registration through, as in sessions/limits.py
        log.warning("could not count a client registration for the rate limit", exc_info=True)
    return 0


@transaction.atomic
def do_register_client(metadata: Any) -> Application:
    """A public client (no secret; PKCE proves it) that may use the authorization code grant."""
    name, uris = checked_metadata(metadata)
    return Application.objects.create(
        name=name or "Unnamed MCP client",
        client_type=Application.CLIENT_PUBLIC,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(uris),
        client_secret="",
        hash_client_secret=False,
        registration_source=Application.RegistrationSource.DCR,
    )


def client_information(app: Application) -> dict[str, Any]:
    return {
        "client_id": app.client_id,
        "client_id_issued_at": int(app.created.timestamp()),
        "client_name": app.name,
        "redirect_uris": app.redirect_uris.split(),
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        "scope": SCOPE,
    }


@open_to_browsers
@require_POST
def register(request: HttpRequest) -> JsonResponse:
    wait = take_registration(request.META.get("REMOTE_ADDR", ""))
    if wait:
        response = _public_json(
            {"error": "too_many_requests", "error_description": "Too many registrations from this address."}, 429
        )
        response["Retry-After"] = str(wait)
        return response
    if len(request.body) > MAX_REGISTRATION_BYTES:
        return _public_json({"error": "invalid_client_metadata", "error_description": "The body is too long."}, 400)
    try:
        metadata = json.loads(request.body or b"null")
        app = do_register_client(metadata)
    except (ValueError, UnicodeDecodeError):
        return _public_json({"error": "invalid_client_metadata", "error_description": "The body is not JSON."}, 400)
    except RegistrationRefused as refused:
        return _public_json({"error": refused.error, "error_description": refused.description}, 400)
    response = _public_json(client_information(app), 201)
    response["Cache-Control"] = "no-store"
    return response


# -- client ID metadata documents ---------------------------------------------------------


class ClientMetadataFetcher:
    """DOT's CIMD fetcher (OAUTH2_PROVIDER["CIMD_METADATA_FETCHER"]), through the portal's own
    outbound policy: a client_id URL reaches no more than a registered server's URL may, and its
    document must pass the same checks as a registration."""

    def fetch(self, client_id: str) -> tuple[dict[str, Any], int]:
        ca_file = settings.PORTAL_OAUTH_CIMD_CA_FILE
        try:
            metadata, headers = fetch_json(
                client_id,
                network_policy(),
                timeout=oauth2_settings.CIMD_FETCH_TIMEOUT_SECONDS,
                max_bytes=oauth2_settings.CIMD_MAX_DOCUMENT_SIZE,
                verify=ssl.create_default_context(cafile=ca_file) if ca_file else True,
            )
            checked_metadata(metadata)
        except FetchRefused as exc:
            raise cimd.CIMDError(f"could not read the client ID metadata document: {exc}") from exc
        except RegistrationRefused as exc:
            raise cimd.CIMDError(f"{exc.error}: {exc.description}") from exc
        return metadata, cimd._effective_max_age(headers.get("cache-control"))


# -- the consent page ----------------------------------------------------------------------


class PortalAuthorizationView(AuthorizationView):
    """DOT's authorize endpoint, with the token's endpoint settled before anyone consents: the one
    the client names (or the aggregate one), and only an endpoint of this portal."""

    template_name = "oauth2_provider/authorize.html"

    def _refused(self, description: str, error: str = "invalid_target") -> HttpResponse:
        return self.render_to_response({"error": {"error": error, "description": description}}, status=400)

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        # RFC 7636 makes a challenge without a method "plain", which proves nothing a stolen code
        # does not already carry: only S256 is taken (a missing challenge DOT refuses itself).
        if "code_challenge" in request.GET and request.GET.get("code_challenge_method") != "S256":
            return self._refused("Only the S256 code challenge method is supported.", "invalid_request")
        requested = request.GET.getlist("resource")
        if len(requested) > 1:
            return self._refused("Ask for one endpoint at a time.")
        resource = endpoint_resource(base_url(request), requested[0] if requested else None)
        if not resource:
            return self._refused("The portal issues tokens only for its own MCP endpoint (/mcp/ or /mcp/<server>/).")
        request.GET = request.GET.copy()
        request.GET.setlist("resource", [resource])
        response = super().get(request, *args, **kwargs)
        redirect_uri = getattr(self, "oauth2_data", {}).get("redirect_uri")
        if response.status_code == 200 and redirect_uri:
            # The consent form's answer is a redirect to the client (its redirect URI, checked by
            # now against the registered ones): the policy lets the form go there and nowhere else.
            parts = urlsplit(redirect_uri)
            response.headers["Content-Security-Policy"] = content_security_policy_with_form_action(
                f"{parts.scheme}://{parts.netloc}"
            )
        return response

    def form_valid(self, form: Any) -> HttpResponse:
        # The hidden field comes back from the browser: settled again, never taken as sent.
        resource = endpoint_resource(base_url(self.request), form.cleaned_data.get("resource") or None)
        if not resource:
            return self._refused("The portal issues tokens only for its own MCP endpoint.")
        form.cleaned_data["resource"] = resource
        if form.cleaned_data.get("code_challenge_method") != "S256":
            return self._refused("Only the S256 code challenge method is supported.", "invalid_request")
        return super().form_valid(form)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        resource = kwargs.get("resource") or ""
        context["endpoint"] = resource
        context["endpoint_server"] = endpoint_server(resource) if resource else ""
        context["redirect_host"] = urlsplit(kwargs.get("redirect_uri") or "").netloc
        application = kwargs.get("application")
        if application is not None and application.registration_source == Application.RegistrationSource.CIMD:
            context["published_at"] = urlsplit(application.client_id).netloc
        return context


class PortalTokenView(TokenView):
    """DOT's token endpoint, reading a `resource` in the form tokens are bound in, so that
    `…/mcp` asks for the same endpoint as `…/mcp/` (DOT compares them as strings)."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if "resource" in request.POST:
            form = request.POST.copy()
            form.setlist("resource", [normalize_resource(value) or value for value in form.getlist("resource")])
            request.POST = form
        response = super().post(request, *args, **kwargs)
        # Some of DOT's refusals (invalid_target) come without a content type; the body is JSON.
        if not response.get("Content-Type", "").startswith("application/json"):
            response["Content-Type"] = "application/json"
        response["Cache-Control"] = "no-store"
        return response


# -- tokens at the endpoint ----------------------------------------------------------------


def check_oauth_token(text: str, resource: str) -> Agent | None:
    """The agent an OAuth access token stands for at `resource`, or None: unknown, expired, revoked
    (revoking deletes the row), without the mcp scope, its person deactivated, or bound to another
    endpoint. All read alike to the caller."""
    if not text or len(text) > 500:
        return None
    checksum = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    token = AccessToken.objects.select_related("user", "refresh_token").filter(token_checksum=checksum).first()
    if token is None or token.user is None or not token.user.is_active:
        return None
    if token.expires <= timezone.now():
        return None
    scopes = token.scope.split()
    if SCOPE not in scopes:
        return None
    # A token bound to no endpoint (not one this portal issues) is no token for any.
    bound = [normalize_resource(value) for value in (token.resource or [])]
    if len(bound) != 1 or not bound[0] or bound[0] != normalize_resource(resource):
        return None
    # The credential a handshake-era session and the rate limit are bound to is the authorization,
    # not the row: every refresh mints a new access token, and a session opened before it must go
    # on. Every rotation keeps the refresh token's family; a token without one stands for itself.
    family = getattr(getattr(token, "refresh_token", None), "token_family", None)
    credential = f"oauth:{family}" if family else f"oauth:{token.pk}"
    return Agent(user=token.user, token=None, servers=None, credential=credential, scopes=scopes)


# -- the person's clients ------------------------------------------------------------------


@dataclass
class OAuthClient:
    """A client a person let in, for the list on the "Connect an agent" page (no token in it)."""

    id: int
    name: str
    redirect_hosts: list[str]
    endpoints: list[str]
    authorized_at: datetime
    last_token_at: datetime


def oauth_clients_for(user: Any) -> list[OAuthClient]:
    """The clients holding a live token of `user`'s: an unexpired access token or an unrevoked
    refresh token."""
    now = timezone.now()
    live: dict[int, dict[str, Any]] = {}
    rows = [
        *AccessToken.objects.filter(user=user, expires__gt=now).values("application_id", "created", "resource"),
        *RefreshToken.objects.filter(user=user, revoked__isnull=True).values("application_id", "created", "resource"),
    ]
    for row in rows:
        if row["application_id"] is None:
            continue
        entry = live.setdefault(row["application_id"], {"first": row["created"], "last": row["created"], "res": set()})
        entry["first"] = min(entry["first"], row["created"])
        entry["last"] = max(entry["last"], row["created"])
        entry["res"].update(row["resource"] or [])
    apps = Application.objects.filter(pk__in=live).order_by("name", "pk")
    return [
        OAuthClient(
            id=app.pk,
            name=app.name,
            redirect_hosts=sorted({urlsplit(uri).netloc for uri in app.redirect_uris.split()}),
            endpoints=sorted(live[app.pk]["res"]),
            authorized_at=live[app.pk]["first"],
            last_token_at=live[app.pk]["last"],
        )
        for app in apps
    ]


class ClientUnknown(Exception):
    pass


@transaction.atomic
def do_revoke_oauth_client(user: Any, application_id: Any) -> Application:
    """Every token and code `user` gave the client, gone at once: the next request with any of them
    is refused. Another person's tokens for the same client stay (each person consents alone)."""
    app = Application.objects.filter(pk=application_id).first() if str(application_id).isdigit() else None
    if app is None:
        raise ClientUnknown()
    refresh = RefreshToken.objects.filter(user=user, application=app, revoked__isnull=True)
    access = AccessToken.objects.filter(user=user, application=app)
    if not refresh.exists() and not access.exists():
        raise ClientUnknown()
    refresh.update(revoked=timezone.now())
    access.delete()
    Grant.objects.filter(user=user, application=app).delete()
    return app


@login_required
@require_POST
def revoke_client(request: HttpRequest, application_id: int) -> HttpResponse:
    try:
        app = do_revoke_oauth_client(request.user, application_id)
    except ClientUnknown:
        messages.error(request, "That client holds no access of yours.")
    else:
        messages.success(request, f"{app.name} can no longer act as you: its tokens are revoked.")
    # The "Connect an agent" page lists the clients; a fixed place, so the form can send nowhere else.
    return redirect(AGENTS_PAGE)
