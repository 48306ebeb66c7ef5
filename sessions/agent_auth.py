"""Who calls the MCP endpoint: the bearer credential of a request, checked (docs/mcp-endpoint.md).

Two kinds of credential carry a person to the endpoint: a personal access token
(sessions/access_tokens.py) and an OAuth access token the portal issued as the endpoint's
authorization server. Either is sent as `Authorization: Bearer <token>`. A request without a usable
one gets a 401 whose `WWW-Authenticate` names the resource's metadata (RFC 9728), which is how an MCP
client such as Claude Code finds where to sign in.
"""

from __future__ import annotations

from .access_tokens import PREFIX, Agent, check_token
from .oauth_server import check_oauth_token


def bearer(authorization: str | None) -> str:
    """The token of an `Authorization: Bearer …` header, or ""."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def authenticate(authorization: str | None, resource: str) -> Agent | None:
    """The agent behind the request's credential, for `resource` (the endpoint's URL the request
    went to), or None when there is none usable."""
    token = bearer(authorization)
    if not token:
        return None
    if token.startswith(PREFIX):
        return check_token(token)
    # An OAuth access token is good only at the endpoint it was issued for (RFC 8707).
    return check_oauth_token(token, resource)


def resource_metadata_url(base: str, path: str) -> str:
    """Where the protected resource's metadata is served for the endpoint at `path` (RFC 9728 §3.1:
    the well-known prefix goes before the resource's path)."""
    return f"{base}/.well-known/oauth-protected-resource{path.rstrip('/')}"


def challenge(base: str, path: str, error: str = "") -> str:
    """The `WWW-Authenticate` value of a 401 from the endpoint at `path`."""
    parts = [f'resource_metadata="{resource_metadata_url(base, path)}"']
    if error:
        parts.insert(0, f'error="{error}"')
    return "Bearer " + ", ".join(parts)
