"""Response headers that Django's own settings do not cover."""

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

# No inline scripts anywhere: pages pass data with json_script and load modules from /static/.
# Tool images arrive as data: URIs.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "media-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


def content_security_policy_with_form_action(origin: str) -> str:
    """The policy for a page whose form ends in a redirect to `origin` (Chromium holds a form's
    redirects to form-action too): the OAuth consent page, which sends the person back to the client."""
    return CONTENT_SECURITY_POLICY.replace("form-action 'self'", f"form-action 'self' {origin}")


def content_security_policy_with_frame_src(origin: str) -> str:
    """The policy for the playground, which frames the MCP Apps sandbox on its own origin (PORTAL_APPS_ORIGIN)."""
    return f"{CONTENT_SECURITY_POLICY}; frame-src {origin}"


def content_security_policy(get_response: Callable[[HttpRequest], HttpResponse]):
    def middleware(request: HttpRequest) -> HttpResponse:
        response = get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response

    return middleware
