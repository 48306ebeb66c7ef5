"""Names as Claude Code's MCP client gives them: `mcp__<server>__<tool>`, each part ^[a-zA-Z0-9_-]{1,64}$."""

from __future__ import annotations

import hashlib
import re

_INVALID = re.compile(r"[^a-zA-Z0-9_-]")
VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_DESCRIPTION_LENGTH = 2048
TRUNCATED_SUFFIX = "… [truncated]"


def normalize_name(name: str) -> str:
    """Replace every character outside [a-zA-Z0-9_-] with '_', as Claude Code does."""
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


MAX_FULL_NAME = 64


def _suffix(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:6]


def full_tool_names(server: str, tools: list[str]) -> dict[str, str]:
    """Each tool's `mcp__<server>__<tool>` name: valid (^[a-zA-Z0-9_-]{1,64}$), unique and stable."""
    return prefixed_names(f"mcp__{normalize_name(server)}__", tools, MAX_FULL_NAME)


def prefixed_names(prefix: str, tools: list[str], limit: int) -> dict[str, str]:
    """Each tool's name after `prefix`, normalized, unique and at most `limit` characters.

    A name that normalizes onto another tool's name, or that is too long, gets a suffix made
    from a hash of the original name, so it does not depend on the order or on the other tools
    (a tool keeps its name when others come and go). A tool whose name needs no change keeps it.
    """
    wanted: dict[str, list[str]] = {}
    for tool in dict.fromkeys(tools):
        wanted.setdefault(prefix + normalize_name(tool), []).append(tool)
    names: dict[str, str] = {}
    for candidate, originals in wanted.items():
        for tool in originals:
            name = candidate
            # Of names that collide, only one can be unchanged by normalizing: it keeps the plain name.
            if (len(originals) > 1 and normalize_name(tool) != tool) or len(name) > limit:
                tail = "_" + _suffix(tool)
                name = name[: limit - len(tail)] + tail
            names[tool] = name
    return names


# On the portal's own endpoint `/mcp/` every tool is `<server>__<tool>`, and a client prefixes its
# own `mcp__<client name>__`: the whole fits Claude Code's 64 characters when the client names the
# portal with up to 6 characters ("portal"), so the endpoint's names keep to the rest.
CLIENT_NAME_ROOM = len("mcp__portal__")
NAME_BUDGET = MAX_FULL_NAME - CLIENT_NAME_ROOM
SEPARATOR = "__"


def endpoint_names(path: str, tools: list[str]) -> dict[str, str]:
    """Each tool's name on `/mcp/`: `<server path>__<tool>`, valid and unique within NAME_BUDGET."""
    return prefixed_names(path + SEPARATOR, tools, NAME_BUDGET)


def names_fit(server: str, tools: list[str]) -> list[str]:
    """Tools of the server named `server` whose `/mcp/` name had to be cut to fit (or, for a name
    that normalizes onto another's, changed): the server's page names them. On `/mcp/<server>/`
    they keep their own names."""
    path = normalize_name(server)
    plain = {tool: f"{path}{SEPARATOR}{normalize_name(tool)}" for tool in tools}
    return [tool for tool, name in endpoint_names(path, tools).items() if name != plain[tool]]


def task_support(tool: dict) -> str:
    """Whether the tool runs as an MCP task (handshake era, `execution.taskSupport`): "required",
    "optional" (the person may ask: "Run as task") or "forbidden" (absent means that)."""
    execution = tool.get("execution")
    support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return support if support in ("required", "optional") else "forbidden"


def annotate_tools(server: str, tools: list[dict]) -> list[dict]:
    """Tools as the portal shows them: each with its `full_name`, a `summary` of its description,
    and its `task_support`."""
    names = full_tool_names(server, [str(tool.get("name", "")) for tool in tools])
    return [
        {
            **tool,
            "full_name": names[str(tool.get("name", ""))],
            "summary": summarize_description(tool.get("description")),
            "task_support": task_support(tool),
        }
        for tool in tools
    ]
