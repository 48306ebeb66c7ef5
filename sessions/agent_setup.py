"""What a person pastes into an MCP client to reach the portal's endpoint (docs/mcp-endpoint.md).

Pure text from the endpoint's URL and a token (or a placeholder): no Django, so the snippets can be
read and run by tests as they are shown.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

PLACEHOLDER = "<your token>"


@dataclass(frozen=True)
class Snippet:
    client: str
    where: str  # the file, or the shell
    text: str
    note: str = ""


def snippets(url: str, token: str = "") -> list[Snippet]:
    """The setup of each client for the endpoint at `url`, with `token` in it (or the placeholder)."""
    token = token or PLACEHOLDER
    bearer = f"Bearer {token}"
    return [
        Snippet(
            "Claude Code",
            "shell",
            f"claude mcp add --transport http portal {url}",
            "Claude Code opens your browser to sign in to the portal (OAuth); no token to copy.",
        ),
        Snippet(
            "Claude Code, with a token",
            "shell",
            f'claude mcp add --transport http portal {url} --header "Authorization: {bearer}"',
            "For a machine with no browser (a server, CI).",
        ),
        Snippet(
            "Cursor",
            "~/.cursor/mcp.json",
            _json({"mcpServers": {"portal": {"url": url, "headers": {"Authorization": bearer}}}}),
        ),
        Snippet(
            "VS Code",
            ".vscode/mcp.json",
            _json({"servers": {"portal": {"type": "http", "url": url, "headers": {"Authorization": bearer}}}}),
        ),
        Snippet(
            "Claude Desktop (through mcp-remote)",
            "claude_desktop_config.json",
            _json(
                {
                    "mcpServers": {
                        "portal": {
                            "command": "npx",
                            "args": ["mcp-remote", url, "--header", "Authorization:${AUTH_HEADER}"],
                            "env": {"AUTH_HEADER": bearer},
                        }
                    }
                }
            ),
            # Claude Desktop on Windows splits arguments on spaces, so the header's space lives in env.
            "The header's value is passed through env: a space inside args is split on some systems.",
        ),
        Snippet("Python (mcp SDK)", "agent.py", _python(url, token)),
    ]


def _json(value: object) -> str:
    return json.dumps(value, indent=2)


def _python(url: str, token: str) -> str:
    # Headers go on the httpx2 client the Streamable HTTP transport is given (mcp 2.x).
    return f"""import asyncio

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

URL = {url!r}
TOKEN = {token!r}


async def main() -> None:
    headers = {{"Authorization": f"Bearer {{TOKEN}}"}}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        async with Client(streamable_http_client(URL, http_client=http)) as client:
            tools = await client.list_tools()
            for tool in tools.tools:
                print(tool.name)


asyncio.run(main())
"""
