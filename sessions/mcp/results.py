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
