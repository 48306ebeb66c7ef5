"""Names as the seeds' client gives them: `mcp__<server>__<tool>`, each part ^[a-zA-Z0-9_-]{1,64}$."""

from __future__ import annotations

import re

_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_DESCRIPTION_LENGTH = 2048
TRUNCATED_SUFFIX = "… [truncated]"


def normalize_name(name: str) -> str:
    """Replace every character outside [a-zA-Z0-9_-] with '_' (the seeds' normalizeNameForMCP)."""
    return _INVALID.sub("_", name.strip())


def is_valid_name(name: str) -> bool:
    return bool(VALID_NAME.match(normalize_name(name)))


def tool_full_name(server: str, tool: str) -> str:
    return f"mcp__{normalize_name(server)}__{normalize_name(tool)}"


def summarize_description(description: str | None) -> str:
    """Descriptions from OpenAPI-generated servers can be tens of KB; summaries keep 2,048 characters."""
    text = description or ""
    if len(text) <= MAX_DESCRIPTION_LENGTH:
        return text
    return text[:MAX_DESCRIPTION_LENGTH] + TRUNCATED_SUFFIX
