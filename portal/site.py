"""Where the portal is served (SITE_URL), and the OAuth addresses made from it.

The OAuth redirect URI is registered with every authorization server and must be where the person's
browser reaches the portal: a portal served on another port than SITE_URL says sends people back to
the wrong address after consent. `runportal` therefore makes the address it serves on SITE_URL when
the environment names none, and pages tell admins when a request arrived elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


def site_addresses(site_url: str, environ: Mapping[str, str]) -> dict[str, str]:
    """SITE_URL and what derives from it, each overridden by the environment when set there."""
    base = site_url.rstrip("/")
    return {
        "SITE_URL": site_url,
        "PORTAL_OAUTH_REDIRECT_URI": environ.get("PORTAL_OAUTH_REDIRECT_URI", base + "/oauth/callback"),
        # A client ID metadata document needs an https URL; by default the portal serves its own when SITE_URL is https.
        "PORTAL_OAUTH_CLIENT_METADATA_URL": environ.get(
            "PORTAL_OAUTH_CLIENT_METADATA_URL",
            base + "/oauth/client-metadata.json" if base.startswith("https://") else "",
        ),
    }


def served_at(host: str, port: int) -> str:
    """The address a browser on this machine uses for a portal listening on host:port."""
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"  # listening everywhere: this machine's own address is one of them
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def serve_at(host: str, port: int) -> str | None:
    """Make the listening address SITE_URL unless the environment set one; the new SITE_URL, or None.

    os.environ is updated too, so processes started from this one (and settings read again) agree.
    """
    from django.conf import settings

    if os.environ.get("SITE_URL"):
        return None
    site_url = served_at(host, port)
    os.environ["SITE_URL"] = site_url
    for name, value in site_addresses(site_url, os.environ).items():
        setattr(settings, name, value)
    return site_url
