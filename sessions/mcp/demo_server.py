"""The demo MCP server shipped with the portal, so a newcomer can try the playground at once.

Run it over stdio (`python -m sessions.mcp.demo_server`) or Streamable HTTP
(`python -m sessions.mcp.demo_server http --port 8765`). It is also the test suite's
real server: every tool here is exercised end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import os
import struct
import sys
import zlib
from typing import Annotated, Literal

from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp.types import ImageContent, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

server = MCPServer(
    name="portal-demo",
    version="1.0.0",
    instructions="A demo server for the MCP Portal playground: echo, add, progress, an image, a form, a sleep.",
)


@server.tool(
    title="Echo",
    description="Echo back the given message.",
    annotations=ToolAnnotations(readOnlyHint=True, openWorldHint=False),
)
def echo(message: str) -> str:
    return message


@server.tool(
    title="Add two numbers",
    description="Add a and b and return the sum as structured content.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def add(a: float, b: float) -> dict[str, float]:
    return {"sum": a + b}


@server.tool(
    title="Count with progress",
    description="Count up to `steps`, reporting progress after each step.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def count(ctx: Context, steps: Annotated[int, Field(ge=1, le=100)] = 5, delay: float = 0.1) -> str:
    for step in range(1, steps + 1):
        await asyncio.sleep(delay)
        await ctx.report_progress(step, steps, f"step {step} of {steps}")
    return f"counted to {steps}"


def _png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A solid-colour PNG made by hand, so the demo needs no imaging library."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


COLOURS = {"red": (220, 38, 38), "green": (22, 163, 74), "blue": (37, 99, 235)}


@server.tool(
    title="Draw a square",
    description="Return a small solid-colour PNG image.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def image(colour: Literal["red", "green", "blue"] = "blue", size: Annotated[int, Field(ge=1, le=256)] = 64) -> list:
    data = base64.b64encode(_png(size, size, COLOURS[colour])).decode()
    return [
        TextContent(type="text", text=f"a {size}x{size} {colour} square"),
        ImageContent(type="image", data=data, mime_type="image/png"),
    ]


class Contact(BaseModel):
    name: str = Field(description="Your name")
    email: str = Field(description="Where to reach you", json_schema_extra={"format": "email"})
    subscribe: bool = Field(default=False, description="Send me news")


def ask_contact(topic: str) -> Elicit[Contact]:
    return Elicit(f"Who should we contact about {topic}?", Contact)


@server.tool(
    title="Ask for a contact",
    description="Ask the user for a name and email through an elicitation form.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def ask(topic: str, answer: Annotated[ElicitationResult[Contact], Resolve(ask_contact)]) -> str:
    if isinstance(answer, AcceptedElicitation):
        return f"will contact {answer.data.name} <{answer.data.email}> about {topic}"
    return f"no contact given ({answer.action})"


@server.tool(
    title="Sleep",
    description="Sleep for the given number of seconds (try Cancel, or a short timeout).",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def sleep(seconds: Annotated[float, Field(ge=0, le=3600)] = 5) -> str:
    await asyncio.sleep(seconds)
    return f"slept {seconds} s"


@server.tool(
    title="Fail",
    description="Raise an error inside the tool, to show how tool errors look.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def fail(reason: str = "it failed on purpose") -> str:
    raise ToolError(reason)


@server.tool(
    title="Digest of an environment variable",
    description="The SHA-256 of an environment variable's value (shows a secret arrived without showing it).",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def env_digest(name: str) -> str:
    value = os.environ.get(name)
    return "unset" if value is None else hashlib.sha256(value.encode()).hexdigest()


@server.tool(
    title="Crash",
    description="Exit the server process in the middle of the call, to show how a crash looks.",
    annotations=ToolAnnotations(destructiveHint=True),
)
def crash() -> str:
    sys.stderr.write("demo server: crashing on request\n")
    sys.stderr.flush()
    os._exit(3)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("transport", nargs="?", choices=["stdio", "http", "sse"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        server.run("stdio")
    elif args.transport == "http":
        server.run("streamable-http", host=args.host, port=args.port)
    else:
        server.run("sse", host=args.host, port=args.port)


if __name__ == "__main__":
    main()
