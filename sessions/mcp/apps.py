"""The MCP Apps extension's words (`io.modelcontextprotocol/ui`): a tool names its app, a `ui://`
resource of `text/html;profile=mcp-app`, and says who may call it, the model, the app or both."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

EXTENSION = "io.modelcontextprotocol/ui"
APP_MIME_TYPE = "text/html;profile=mcp-app"
# What the portal's client declares: it renders apps (the playground) in this form.
CLIENT_SETTINGS = {"mimeTypes": [APP_MIME_TYPE]}


def resource_uri(tool: Mapping[str, Any]) -> str:
    """The `ui://` resource a tool names as its app, or ""."""
    meta = tool.get("_meta")
    if not isinstance(meta, Mapping):
        return ""
    ui = meta.get("ui")
    uri = ui.get("resourceUri") if isinstance(ui, Mapping) else None
    uri = uri if isinstance(uri, str) else meta.get("ui/resourceUri")
    return uri if isinstance(uri, str) and uri.startswith("ui://") else ""


def _visibility(tool: Mapping[str, Any]) -> list[Any] | None:
    meta = tool.get("_meta")
    ui = meta.get("ui") if isinstance(meta, Mapping) else None
    visibility = ui.get("visibility") if isinstance(ui, Mapping) else None
    return visibility if isinstance(visibility, list) else None


def callable_by_apps(tool: Mapping[str, Any]) -> bool:
    """The extension's `visibility`: ["model", "app"] unless the tool says otherwise."""
    visibility = _visibility(tool)
    return visibility is None or "app" in visibility


def shown_to_models(tool: Mapping[str, Any]) -> bool:
    """Whether a model may be offered the tool: an app-only tool (`visibility: ["app"]`) is its
    app's, listed only to a client that renders apps. Audience, not permission: a call is decided
    by the rules whoever makes it."""
    visibility = _visibility(tool)
    return visibility is None or "model" in visibility
