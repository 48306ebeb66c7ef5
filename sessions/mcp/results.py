"""MCP results as plain JSON for the browser and the call record."""

from __future__ import annotations

from typing import Any

from mcp import types


def dump(model: Any) -> dict[str, Any]:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def tool_to_dict(tool: types.Tool) -> dict[str, Any]:
    data = dump(tool)
    data.pop("_meta", None)
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
        data.pop("_meta", None)
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
