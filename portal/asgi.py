"""ASGI entry point: HTTP through Django, WebSockets through Channels (authenticated, same origin: portal/origin.py);
the apps origin (PORTAL_APPS_ORIGIN) gets only the MCP Apps sandbox page (portal/apps_origin.py)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from portal.apps_origin import AppsOriginRouter  # noqa: E402
from portal.origin import SameOriginValidator  # noqa: E402
from sessions.endpoint import routing  # noqa: E402
from sessions.routing import websocket_urlpatterns  # noqa: E402

# `/mcp/` is the portal's MCP endpoint (sessions/endpoint.py); everything else is Django's.
http_app = routing(ASGIStaticFilesHandler(django_asgi_app) if settings.PORTAL_SERVE_STATIC else django_asgi_app)

application = AppsOriginRouter(
    ProtocolTypeRouter(
        {
            "http": http_app,
            "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )
)
