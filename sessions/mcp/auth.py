"""OAuth 2.1 to MCP servers, per (user, server), on top of the SDK's OAuthClientProvider.

No Django here. The Django side hands in a `CredentialStore` (the encrypted Credential row)
and, for an interactive authorization, a redirect handler and a callback handler.

What this adds to the SDK's provider (re-check these private hooks on every SDK upgrade):
- a restart does not force a new login: `_initialize` restores the token's expiry and the
  discovered metadata with the tokens (the pitfall in docs: the stock provider restores neither);
- refresh ahead of expiry, with jitter, single-flight across processes through the store's
  lease, re-reading the store under the lease so a token another process refreshed is used;
- a 401 with a refresh token in hand tries the refresh before a new login;
- non-standard refresh errors (invalid_refresh_token, expired_refresh_token, token_expired,
  HTTP 200 with an error body) normalized to invalid_grant, which ends in "needs auth";
- Claude Code's discovery order: an admin-configured metadata URL (https only) first, then
  RFC 9728 + RFC 8414/OIDC (the SDK), then path-aware RFC 8414 for servers without RFC 9728;
- at most `max_authorizations` interactive authorizations per provider (step-up loops end);
- a dynamic registration made for another redirect URI is made again before an authorization;
- without an interactive handler, a needed authorization raises AuthorizationRequired at once.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, OAuthTokenError
from mcp.client.auth.utils import issuers_match, union_scopes
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from pydantic import AnyUrl, ValidationError

log = logging.getLogger(__name__)

NONSTANDARD_INVALID_GRANT_ALIASES = frozenset({"invalid_refresh_token", "expired_refresh_token", "token_expired"})
AS_METADATA_PATHS = ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")
PRM_PATH = "/.well-known/oauth-protected-resource"


class AuthorizationRequired(OAuthFlowError):
    """The server needs the user to authorize (again), and nobody is there to do it now."""

    def __init__(self, message: str, scope: str | None = None):
        super().__init__(message)
        self.scope = scope


class AuthorizationRefused(OAuthFlowError):
    """The authorization server sent the browser back with an error instead of a code."""


class _ExpectedAuthorization(logging.Filter):
    """Drops the SDK's "OAuth flow error" traceback for an outcome that is no fault of the code.

    The SDK logs every exception of its flow with a traceback. A server asking for an authorization
    no one is there to give (a Test connection, a call before Connect) is expected, and
    `_no_one_to_ask` says so in one line; a refusal on the callback is the person's or the server's
    answer, which the flow's caller logs and explains.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], AuthorizationRequired | AuthorizationRefused))


logging.getLogger("mcp.client.auth.oauth2").addFilter(_ExpectedAuthorization())


@dataclass
class Discovery:
    """What discovery found, kept with the tokens so a restarted worker can refresh at once."""

    oauth_metadata: OAuthMetadata | None = None
    resource_metadata: ProtectedResourceMetadata | None = None
    auth_server_url: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "oauth_metadata": self.oauth_metadata.model_dump(mode="json", exclude_none=True)
            if self.oauth_metadata
            else None,
            "resource_metadata": self.resource_metadata.model_dump(mode="json", exclude_none=True)
            if self.resource_metadata
            else None,
            "auth_server_url": self.auth_server_url,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Discovery:
        data = data or {}
        try:
            oauth = OAuthMetadata.model_validate(data["oauth_metadata"]) if data.get("oauth_metadata") else None
            prm = (
                ProtectedResourceMetadata.model_validate(data["resource_metadata"])
                if data.get("resource_metadata")
                else None
            )
        except ValidationError:
            return cls()  # stale shape: discovery runs again on the next 401
        return cls(oauth, prm, data.get("auth_server_url"))


@dataclass
class StoredAuth:
    tokens: OAuthToken | None = None
    expires_at: float | None = None
    client_info: OAuthClientInformationFull | None = None
    discovery: Discovery = field(default_factory=Discovery)
    required_scope: str | None = None


class CredentialStore(Protocol):
    """The SDK's TokenStorage plus what a restart-proof, multi-process client needs."""

    async def get_tokens(self) -> OAuthToken | None: ...
    async def set_tokens(self, tokens: OAuthToken) -> None: ...
    async def get_client_info(self) -> OAuthClientInformationFull | None: ...
    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None: ...

    async def load(self) -> StoredAuth: ...
    async def save_discovery(self, discovery: Discovery, *, refreshed: bool) -> None: ...
    async def grant_lost(self, error: str) -> None: ...
    async def note_required_scope(self, scope: str | None) -> None: ...
    def refresh_lease(self) -> AbstractAsyncContextManager[None]: ...


@dataclass(frozen=True)
class OAuthSettings:
    """The admin's settings for one server plus the portal's own (plain data)."""

    redirect_uri: str
    client_name: str = "MCP Portal"
    client_id: str = ""
    client_secret: str = ""
    token_endpoint_auth_method: str = "client_secret_basic"
    metadata_url: str = ""
    scope: str = ""
    client_metadata_url: str = ""
    refresh_ahead: float = 60.0
    refresh_jitter: float = 30.0
    max_authorizations: int = 3


def registered_for(client_info: OAuthClientInformationFull | None, redirect_uri: str) -> bool:
    """Whether a stored registration may send the browser back to `redirect_uri` (True when it names none)."""
    if client_info is None or not client_info.redirect_uris:
        return True
    wanted = str(AnyUrl(redirect_uri))
    return any(str(uri) == wanted for uri in client_info.redirect_uris)


def normalize_oauth_error_body(status: int, body: bytes) -> tuple[int, str | None]:
    """(status, error code) of a token response, normalized as Claude Code does.

    Some servers (Slack among them) answer a failed refresh with HTTP 200 and an error body,
    or with their own error codes; both are read as a 400 invalid_grant.
    """
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        data = {}
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, str):
        error = None
    if error in NONSTANDARD_INVALID_GRANT_ALIASES:
        error = "invalid_grant"
    if status == 200 and error is not None:
        status = 400
    return status, error


def refresh_lead(token: OAuthToken | None, ahead: float, jitter: float) -> float:
    """How long before expiry to refresh: `ahead` plus random jitter, at most half the token's life."""
    lead = ahead + random.uniform(0, jitter)
    if token is not None and token.expires_in:
        lead = min(lead, int(token.expires_in) / 2)
    return lead


def _path_of(url: str) -> str:
    return urlparse(url).path


def _is_as_metadata_request(request: httpx2.Request) -> bool:
    path = request.url.path
    return request.method == "GET" and any(path.startswith(p) or p in path for p in AS_METADATA_PATHS)


def _issuer_for_metadata_url(url: str) -> str | None:
    """The issuer a well-known metadata URL names (RFC 8414 §3.1 and OIDC); None for any other URL."""
    parsed = urlparse(url)
    origin = f"{parsed.scheme}://{parsed.netloc}"
    for well_known in AS_METADATA_PATHS:
        if parsed.path.startswith(well_known):
            return origin + parsed.path[len(well_known) :]
        if parsed.path.endswith(well_known):
            return origin + parsed.path[: -len(well_known)]
    return None


class PortalOAuthProvider(OAuthClientProvider):
    def __init__(
        self,
        server_url: str,
        settings: OAuthSettings,
        store: CredentialStore,
        redirect_handler: Callable[[str], Awaitable[None]] | None = None,
        callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]] | None = None,
        required_scope: str | None = None,
        force_authorization: bool = False,
    ):
        metadata = OAuthClientMetadata(
            client_name=settings.client_name,
            redirect_uris=[settings.redirect_uri],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method=settings.token_endpoint_auth_method if settings.client_id else None,  # type: ignore[arg-type]
            scope=settings.scope or None,
            application_type="web",
        )
        self.interactive = redirect_handler is not None
        super().__init__(
            server_url,
            metadata,
            store,
            redirect_handler=redirect_handler or self._no_one_to_ask,
            callback_handler=callback_handler or self._no_callback,
            client_metadata_url=settings.client_metadata_url or None,
        )
        self.store = store
        self.settings = settings
        self.required_scope = required_scope
        self.authorizations = 0
        self.refreshes = 0
        self._lead: float | None = None
        self._configured_metadata: OAuthMetadata | None = None
        # "Connect" always asks the user again (another account, more scopes): stored tokens are ignored.
        self.force_authorization = force_authorization
        self.last_error: OAuthFlowError | None = None

    # -- without a person ------------------------------------------------------------------

    async def _no_one_to_ask(self, url: str) -> None:
        scope = parse_qs(urlparse(url).query).get("scope", [None])[0]
        await self.store.note_required_scope(scope)
        log.info("OAuth: %s needs an authorization and no one is there to give it", self.context.server_url)
        raise AuthorizationRequired("the server needs you to authorize the portal", scope)

    async def _no_callback(self) -> AuthorizationCodeResult:  # pragma: no cover - never reached
        raise AuthorizationRequired("the server needs you to authorize the portal")

    # -- state that must survive a restart ---------------------------------------------------

    async def _initialize(self) -> None:
        stored = await self.store.load()
        if self.force_authorization:
            stored.tokens, stored.expires_at = None, None
        self.context.current_tokens = stored.tokens
        self.context.token_expiry_time = stored.expires_at
        if self.settings.client_id:
            # The admin's pre-registered client wins over anything registered dynamically.
            self.context.client_info = OAuthClientInformationFull(
                client_id=self.settings.client_id,
                client_secret=self.settings.client_secret or None,
                token_endpoint_auth_method=self.settings.token_endpoint_auth_method,  # type: ignore[arg-type]
                redirect_uris=[self.settings.redirect_uri],  # type: ignore[list-item]
            )
        else:
            self.context.client_info = stored.client_info
            if self.interactive and not registered_for(stored.client_info, self.settings.redirect_uri):
                # Registered for another redirect URI (SITE_URL changed): the server would refuse the
                # authorization ("unknown client or redirect_uri"), so the SDK registers again. A
                # provider without a person keeps it: refreshing needs no redirect URI.
                log.info(
                    "OAuth client for %s was registered for another redirect URI; registering again",
                    self.context.server_url,
                )
                self.context.client_info = None
        discovery = stored.discovery
        if discovery.oauth_metadata is not None and self.context.oauth_metadata is None:
            self.context.oauth_metadata = discovery.oauth_metadata
        if discovery.resource_metadata is not None and self.context.protected_resource_metadata is None:
            self.context.protected_resource_metadata = discovery.resource_metadata
        if discovery.auth_server_url and self.context.auth_server_url is None:
            self.context.auth_server_url = discovery.auth_server_url
        if stored.required_scope and self.interactive:
            self.required_scope = union_scopes(self.required_scope, stored.required_scope)
        self._lead = None
        self._initialized = True

    def _discovery(self) -> Discovery:
        return Discovery(
            self.context.oauth_metadata, self.context.protected_resource_metadata, self.context.auth_server_url
        )

    # -- refresh: ahead of time, once across processes, errors normalized ------------------------

    def _refresh_due(self) -> bool:
        if not self.context.can_refresh_token():
            return False
        expires = self.context.token_expiry_time
        if expires is None:
            return False
        if self._lead is None:
            self._lead = refresh_lead(
                self.context.current_tokens, self.settings.refresh_ahead, self.settings.refresh_jitter
            )
        return time.time() >= expires - self._lead

    async def _refresh(
        self, request: httpx2.Request, rejected: str | None = None
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """Refresh under the store's lease, unless another process already did.

        `rejected` is an access token the server just refused: refresh unless the store
        already holds a different one.
        """
        async with self.store.refresh_lease():
            await self._initialize()  # what another process may have stored meanwhile
            current = self.context.current_tokens.access_token if self.context.current_tokens else None
            if rejected is None and not self._refresh_due() and self.context.is_token_valid():
                return
            if rejected is not None and current != rejected and self.context.is_token_valid():
                return
            if not self.context.can_refresh_token():
                return
            self.context.protocol_version = request.headers.get(MCP_PROTOCOL_VERSION_HEADER)
            refresh_request = await self._refresh_token()
            response = yield refresh_request
            self.refreshes += 1
            if await self._handle_refresh_response(response):
                await self.store.save_discovery(self._discovery(), refreshed=True)

    async def _handle_refresh_response(self, response: httpx2.Response) -> bool:
        body = await response.aread()
        status, error = normalize_oauth_error_body(response.status_code, body)
        if status == 200:
            return await super()._handle_refresh_response(response)
        if status >= 500 or status == 429:
            # The authorization server is having trouble; the grant may be fine. Keep it.
            raise OAuthTokenError(f"token refresh failed for now (HTTP {status}); try again shortly")
        message = f"refresh refused: {error or f'HTTP {status}'}"
        log.info("OAuth %s for %s", message, self.context.server_url)
        self.context.clear_tokens()
        await self.store.grant_lost(message if error != "invalid_grant" else "refresh refused: invalid_grant")
        return False

    # -- authorization ----------------------------------------------------------------------

    async def _perform_authorization_code_grant(self) -> tuple[str, str]:
        if self.authorizations >= self.settings.max_authorizations:
            raise OAuthFlowError(f"gave up after {self.authorizations} authorization attempts")
        if self.required_scope and self.interactive:
            # A step-up that failed while no one was there: ask for those scopes now too.
            self.context.client_metadata.scope = union_scopes(self.context.client_metadata.scope, self.required_scope)
        self.authorizations += 1
        return await super()._perform_authorization_code_grant()

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)
        self.force_authorization = False
        await self.store.save_discovery(self._discovery(), refreshed=False)

    def _expected_issuer(self) -> str:
        if self._configured_metadata is not None:
            return str(self._configured_metadata.issuer)
        return super()._expected_issuer()

    async def _fetch_configured_metadata(self) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        url = self.settings.metadata_url
        if urlparse(url).scheme != "https":
            raise OAuthFlowError("the configured authorization server metadata URL must be https")
        response = yield httpx2.Request("GET", url, headers={"Accept": "application/json"})
        body = await response.aread()
        if response.status_code != 200:
            raise OAuthFlowError(f"the configured metadata URL answered HTTP {response.status_code}")
        try:
            metadata = OAuthMetadata.model_validate_json(body)
        except ValidationError as exc:
            raise OAuthFlowError(f"the configured metadata URL does not serve OAuth metadata: {exc}") from None
        named = _issuer_for_metadata_url(url)
        if named is not None and not issuers_match(str(metadata.issuer), named):
            raise OAuthFlowError(f"issuer mismatch at the configured metadata URL: {metadata.issuer} != {named}")
        self._configured_metadata = metadata

    async def _path_aware_fallback(self) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """Legacy servers without RFC 9728: try /.well-known/oauth-authorization-server/<path> (discovery's last step)."""
        parsed = urlparse(self.context.server_url)
        url = f"{parsed.scheme}://{parsed.netloc}{AS_METADATA_PATHS[0]}{parsed.path.rstrip('/')}"
        candidate = yield httpx2.Request("GET", url, headers={MCP_PROTOCOL_VERSION_HEADER: "2025-06-18"})
        if candidate.status_code != 200:
            return
        try:
            metadata = OAuthMetadata.model_validate_json(await candidate.aread())
        except ValidationError:
            return
        expected = f"{parsed.scheme}://{parsed.netloc}{parsed.path.rstrip('/')}"
        if not issuers_match(str(metadata.issuer), expected):
            raise OAuthFlowError(f"Authorization server metadata issuer mismatch: {metadata.issuer} != {expected}")
        self.context.oauth_metadata = metadata
        self.context.auth_server_url = str(metadata.issuer)

    # -- the flow ---------------------------------------------------------------------------

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        # The SDK's transport turns an exception here into a closed connection; keep it for the diagnosis.
        flow = self._portal_flow(request)
        try:
            step = await flow.__anext__()
            while True:
                step = await flow.asend((yield step))
        except StopAsyncIteration:
            return
        except OAuthFlowError as exc:
            self.last_error = exc
            raise
        finally:
            await flow.aclose()

    async def _portal_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        async with self.context.lock:
            if not self._initialized:
                await self._initialize()
            if self._refresh_due():
                steps = self._refresh(request)
                try:
                    step = await steps.__anext__()
                    while True:
                        step = await steps.asend((yield step))
                except StopAsyncIteration:
                    pass

        inner = super()._auth_flow(request)
        retried_with_refresh = False
        try:
            outgoing = await inner.__anext__()
            while True:
                side = outgoing is not request
                if side and self._configured_metadata is not None and _is_as_metadata_request(outgoing):
                    # The configured metadata wins; the SDK's well-known guesses are answered "not here".
                    self.context.oauth_metadata = self._configured_metadata
                    self.context.auth_server_url = str(self._configured_metadata.issuer)
                    response = httpx2.Response(404, request=outgoing)
                else:
                    extra: AsyncGenerator[httpx2.Request, httpx2.Response] | None = None
                    if side and self.settings.metadata_url and self._configured_metadata is None:
                        if PRM_PATH in outgoing.url.path:
                            extra = self._fetch_configured_metadata()
                    if extra is not None:
                        try:
                            step = await extra.__anext__()
                            while True:
                                step = await extra.asend((yield step))
                        except StopAsyncIteration:
                            pass
                    if side and self._configured_metadata is not None and _is_as_metadata_request(outgoing):
                        self.context.oauth_metadata = self._configured_metadata
                        self.context.auth_server_url = str(self._configured_metadata.issuer)
                        response = httpx2.Response(404, request=outgoing)
                    else:
                        response = yield outgoing
                    extra = None
                    if side and _is_as_metadata_request(outgoing) and response.status_code != 200 and self._legacy():
                        extra = self._path_aware_fallback()
                    elif (
                        not side
                        and response.status_code == 401
                        and not retried_with_refresh
                        and self.context.can_refresh_token()
                    ):
                        # An access token rejected before its time: a refresh is cheaper than a new login.
                        retried_with_refresh = True
                        rejected = self.context.current_tokens.access_token if self.context.current_tokens else None
                        extra = self._refresh(request, rejected=rejected)
                    if extra is not None:
                        try:
                            step = await extra.__anext__()
                            while True:
                                step = await extra.asend((yield step))
                        except StopAsyncIteration:
                            pass
                        if not side and self.context.is_token_valid():
                            self._add_auth_header(request)
                            response = yield request
                outgoing = await inner.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await inner.aclose()

    def _legacy(self) -> bool:
        return (
            self.context.auth_server_url is None
            and self.context.protected_resource_metadata is None
            and self.context.oauth_metadata is None
            and bool(_path_of(self.context.server_url).strip("/"))
        )
