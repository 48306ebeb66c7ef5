"""The portal's own authorization server (sessions/oauth_server.py): metadata at the site root,
the protocol under /oauth/."""

from django.urls import path, re_path
from oauth2_provider import views as dot

from sessions import oauth_server

urlpatterns = [
    path(
        ".well-known/oauth-authorization-server",
        oauth_server.authorization_server_metadata,
        name="oauth_server_metadata",
    ),
    # With or without the endpoint's trailing slash: the 401's resource_metadata names it without,
    # clients that find it on their own (RFC 9728 §3.1 path insertion) keep the slash they were given.
    # Nothing at the bare /.well-known/oauth-protected-resource: the origin itself is no resource.
    re_path(
        r"^\.well-known/oauth-protected-resource/mcp/?$",
        oauth_server.protected_resource_metadata,
        name="oauth_resource_metadata",
    ),
    re_path(
        r"^\.well-known/oauth-protected-resource/mcp/(?P<server>[^/]+)/?$",
        oauth_server.protected_resource_metadata,
        name="oauth_resource_metadata_server",
    ),
    path("oauth/authorize", oauth_server.PortalAuthorizationView.as_view(), name="oauth_authorize"),
    path("oauth/token", oauth_server.open_to_browsers(oauth_server.PortalTokenView.as_view()), name="oauth_token"),
    path("oauth/revoke", oauth_server.open_to_browsers(dot.RevokeTokenView.as_view()), name="oauth_revoke"),
    path("oauth/register", oauth_server.register, name="oauth_register"),
    path("agents/oauth/<int:application_id>/revoke", oauth_server.revoke_client, name="oauth_client_revoke"),
]
