"""MCP results as plain JSON for the browser and the call record."""

from __future__ import annotations

from typing import Any

from mcp import types


def dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


# What of a `_meta` the portal keeps: the MCP Apps extension's (docs/tasks-and-apps.md), which names a
# tool's app (`ui.resourceUri`, or the older flat `ui/resourceUri`) and an app's CSP domains. The rest
# of a server's `_meta` is its own business and stays out of records and pages.
APP_META_KEYS = ("ui", "ui/resourceUri")


def _app_meta(data: dict[str, Any]) -> None:
    meta = data.pop("_meta", None)
    kept = {k: meta[k] for k in APP_META_KEYS if k in meta} if isinstance(meta, dict) else {}
    if kept:
        data["_meta"] = kept


def tool_to_dict(tool: types.Tool) -> dict[str, Any]:
    data = dump(tool)
    _app_meta(data)
    return data


def call_result_to_dict(result: types.CallToolResult) -> dict[str, Any]:
    return {
        "content": [dump(block) for block in result.content],
        "structuredContent": result.structured_content,
        "isError": bool(result.is_error),
    }


# Resources and prompts. A blob or text bigger than this is left out of what reaches the
# browser (and the channel layer), with its size, rather than shipped whole.
MAX_CONTENT_CHARS = 2_000_000


def listed(items: list[Any]) -> list[dict[str, Any]]:
    """Resources, templates or prompts from a list result, as plain dicts without `_meta`."""
    out = []
    for item in items:
        data = dump(item)
        data.pop("_meta", None)
        out.append(data)
    return out


def resource_contents_to_dict(result: types.ReadResourceResult) -> dict[str, Any]:
    contents = []
    for item in result.contents:
        data = dump(item)
        _app_meta(data)
        for field in ("text", "blob"):
            value = data.get(field)
            if isinstance(value, str) and len(value) > MAX_CONTENT_CHARS:
                del data[field]
                data["omitted"] = f"{field} of {len(value)} characters is too large to show"
        contents.append(data)
    return {"contents": contents}


def prompt_to_dict(result: types.GetPromptResult) -> dict[str, Any]:
    return {
        "description": result.description or "",
        "messages": [{"role": m.role, "content": dump(m.content)} for m in result.messages],
    }


def completion_to_dict(result: types.CompleteResult) -> dict[str, Any]:
    completion = result.completion
    # The spec caps values at 100; a server that sends more must not flood the page.
    return {
        "values": [str(v) for v in completion.values[:100]],
        "total": completion.total,
        "hasMore": completion.has_more,
    }
