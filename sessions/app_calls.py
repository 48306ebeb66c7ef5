"""Calls an MCP App makes from the playground (docs/tasks-and-apps.md): which it may make at all.

An app is a server's `ui://` resource that a tool of that server names (`_meta.ui.resourceUri`, or
the older `_meta["ui/resourceUri"]`). Its `tools/call` reaches the portal as the page's `call`
message marked with the app's URI; once it passes the checks here it is decided by the same
`decide()` as the person's own calls, and recorded `via: app` with the URI as its client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from servers.models import Server

from .actions import Came
from .mcp.apps import callable_by_apps, resource_uri
from .messages import MessageError
from .models import Via


def refusal(tools: list[Any], app: str, tool: str) -> str:
    """Why the app may not call `tool` of the server whose last tool list is `tools`; "" if it may.

    Only the server's own tools: an app no tool of this server names is another server's (or none's).
    """
    listed = [t for t in tools if isinstance(t, Mapping)]
    if not any(resource_uri(t) == app for t in listed):
        return f"The app {app} is not one of this server's apps: an app may call only its own server's tools."
    called = next((t for t in listed if t.get("name") == tool), None)
    if called is None:
        return f"The app may call only the server's listed tools, and {tool!r} is not one of them."
    if not callable_by_apps(called):
        return f"The tool {tool!r} is not callable by apps (its visibility leaves out 'app')."
    return ""


def came(server_id: int, app: str, tool: str) -> Came:
    """How an app's call came, after checking the app may make it (a MessageError if not)."""
    tools = Server.objects.filter(pk=server_id).values_list("tools", flat=True).first()
    reason = refusal(tools if isinstance(tools, list) else [], app, tool)
    if reason:
        raise MessageError(reason, kind="app_refused")
    return Came(via=Via.APP, client=app)
