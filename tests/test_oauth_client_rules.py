"""The OAuth client's rules that need no server: error normalization, refresh timing, metadata URLs."""

from __future__ import annotations

import pytest
from mcp.shared.auth import OAuthToken

from sessions.mcp.auth import _issuer_for_metadata_url, normalize_oauth_error_body, refresh_lead


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (400, b'{"error": "invalid_refresh_token"}', (400, "invalid_grant")),
        (400, b'{"error": "expired_refresh_token"}', (400, "invalid_grant")),
        (401, b'{"error": "token_expired"}', (401, "invalid_grant")),
        (200, b'{"ok": false, "error": "invalid_grant"}', (400, "invalid_grant")),  # Slack's 200 with an error
        (200, b'{"access_token": "a", "token_type": "Bearer"}', (200, None)),
        (400, b'{"error": "invalid_client"}', (400, "invalid_client")),
        (502, b"<html>bad gateway</html>", (502, None)),
    ],
)
def test_refresh_errors_are_normalized_as_in_claude_code(status, body, expected):
    assert normalize_oauth_error_body(status, body) == expected


def test_refresh_starts_ahead_of_expiry_with_jitter_but_within_half_the_lifetime():
    long_lived = OAuthToken(access_token="a", expires_in=3600)
    leads = {refresh_lead(long_lived, 60, 30) for _ in range(50)}
    assert all(60 <= lead <= 90 for lead in leads) and len(leads) > 1
    assert refresh_lead(OAuthToken(access_token="a", expires_in=10), 60, 30) == 5


@pytest.mark.parametrize(
    ("url", "issuer"),
    [
        ("https://as.example/.well-known/oauth-authorization-server", "https://as.example"),
        ("https://as.example/.well-known/oauth-authorization-server/tenant1", "https://as.example/tenant1"),
        ("https://as.example/tenant1/.well-known/openid-configuration", "https://as.example/tenant1"),
        ("https://as.example/custom/metadata.json", None),
    ],
)
def test_a_configured_metadata_url_names_its_issuer(url, issuer):
    assert _issuer_for_metadata_url(url) == issuer
