"""The MCP server the official conformance suite's server scenarios expect, written with the SDK.

`python tests/conformance/server.py PORT` serves it over Streamable HTTP at http://127.0.0.1:PORT/mcp.
`make conformance` runs the suite's `server` command against it directly, then through the portal's
`/mcp/<server>/` (tests/conformance/through_portal.py), so that a scenario failing only through the
portal is the portal's doing. The names and answers below are the suite's (its scenario texts in
@modelcontextprotocol/conformance 0.1.16): test_simple_text, test://static-text, test_simple_prompt...
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import itertools
import json
import struct
import sys
import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.context import ServerRequestContext
from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import Message, UserMessage
from mcp.server.mcpserver.resolve import Elicit, Resolve, Sample
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.types import (
    AudioContent,
    Completion,
    CompletionArgument,
    CompletionContext,
    CreateMessageResult,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    ListToolsResult,
    PaginatedRequestParams,
    PromptReference,
    ResourceTemplateReference,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from sessions.mcp.demo_server import _png  # noqa: E402 - the demo's hand-made PNG, not a second one

server = MCPServer(name="conformance-fixture", version="1.0.0")

PNG = base64.b64encode(_png(1, 1, (255, 0, 0))).decode()


def _wav() -> str:
    """A tenth of a second of silence, 8 kHz mono 8-bit PCM."""
    samples = b"\x80" * 800
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 8000, 1, 8)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(samples)) + samples
    return base64.b64encode(b"RIFF" + struct.pack("<I", len(body)) + body).decode()


# -- tools ---------------------------------------------------------------------------------------


@server.tool(description="Return a simple text.")
def test_simple_text() -> str:
    return "This is a simple text response for testing."


@server.tool(description="Return a 1x1 red PNG image.")
def test_image_content() -> list:
    return [ImageContent(type="image", data=PNG, mime_type="image/png")]


@server.tool(description="Return a short WAV sound.")
def test_audio_content() -> list:
    return [AudioContent(type="audio", data=_wav(), mime_type="audio/wav")]


@server.tool(description="Return an embedded text resource.")
def test_embedded_resource() -> list:
    resource = TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return [EmbeddedResource(type="resource", resource=resource)]


@server.tool(description="Return text, an image and an embedded resource.")
def test_multiple_content_types() -> list:
    resource = TextResourceContents(
        uri="test://mixed-content-resource",
        mime_type="application/json",
        text=json.dumps({"test": "data", "value": 123}),
    )
    return [
        TextContent(type="text", text="Multiple content types test:"),
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        EmbeddedResource(type="resource", resource=resource),
    ]


LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
level = {"now": "debug"}  # what logging/setLevel last asked for (one client at a time in the suite)


async def _log(ctx: Context, at: str, text: str) -> None:
    if LEVELS.index(at) >= LEVELS.index(level["now"]):
        await ctx.log(at, text)


@server.tool(description="Send three info log messages, 50 ms apart.")
async def test_tool_with_logging(ctx: Context) -> str:
    await _log(ctx, "info", "Tool execution started")
    await asyncio.sleep(0.05)
    await _log(ctx, "info", "Tool processing data")
    await asyncio.sleep(0.05)
    await _log(ctx, "info", "Tool execution completed")
    return "Tool with logging executed successfully"


@server.tool(description="Always fail.")
def test_error_handling() -> str:
    raise ToolError("This tool intentionally returns an error for testing")


@server.tool(description="Report progress 0, 50 and 100 of 100, 50 ms apart.")
async def test_tool_with_progress(ctx: Context) -> str:
    for step in (0, 50, 100):
        await ctx.report_progress(step, 100)
        if step < 100:
            await asyncio.sleep(0.05)
    return "Tool with progress executed successfully"


# Requests to the client go through the SDK's resolvers: mid-call in the handshake era, as an
# input-required round in the 2026-07-28 era (which the portal's worker speaks to HTTP servers).


def ask_the_model(prompt: str) -> Sample:
    return Sample([SamplingMessage(role="user", content=TextContent(type="text", text=prompt))], max_tokens=100)


@server.tool(description="Ask the client's model (sampling/createMessage) to answer the prompt.")
def test_sampling(prompt: str, reply: Annotated[CreateMessageResult, Resolve(ask_the_model)]) -> str:
    said = reply.content.text if isinstance(reply.content, TextContent) else str(reply.content)
    return f"LLM response: {said}"


def _said(answer: ElicitationResult[Any]) -> str:
    content = answer.data.model_dump() if isinstance(answer, AcceptedElicitation) else None
    return f"action={answer.action}, content={json.dumps(content)}"


class User(BaseModel):
    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


def ask_the_user(message: str) -> Elicit[User]:
    return Elicit(message, User)


@server.tool(description="Ask the user for a username and an email (elicitation/create).")
def test_elicitation(message: str, answer: Annotated[ElicitationResult[User], Resolve(ask_the_user)]) -> str:
    return "User response: " + _said(answer)


class Defaults(BaseModel):
    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: Literal["active", "inactive", "pending"] = Field(default="active", description="User status")
    verified: bool = Field(default=True, description="Verification status")


def ask_with_defaults() -> Elicit[Defaults]:
    return Elicit("Please review your details", Defaults)


@server.tool(description="Ask for a form whose every primitive field has a default (SEP-1034).")
def test_elicitation_sep1034_defaults(
    answer: Annotated[ElicitationResult[Defaults], Resolve(ask_with_defaults)],
) -> str:
    return "Elicitation completed: " + _said(answer)


def _titled(options: list[tuple[str, str]], key: str, multi: bool = False) -> Any:
    # MCP's titled enums (SEP-1330): `oneOf` (single) or `items.anyOf` (multi) of {const, title},
    # instead of pydantic's bare `enum`.
    def extra(schema: dict[str, Any]) -> None:
        choices = [{"const": value, "title": title} for value, title in options]
        if multi:
            schema["items"] = {key: choices}
        else:
            schema.pop("enum", None)
            schema[key] = choices

    return extra


OPTIONS = [("value1", "First Option"), ("value2", "Second Option"), ("value3", "Third Option")]
CHOICES = [("value1", "First Choice"), ("value2", "Second Choice"), ("value3", "Third Choice")]


class Enums(BaseModel):
    untitledSingle: Literal["option1", "option2", "option3"]  # noqa: N815 - the suite's names
    titledSingle: Literal["value1", "value2", "value3"] = Field(json_schema_extra=_titled(OPTIONS, "oneOf"))  # noqa: N815
    legacyEnum: Literal["opt1", "opt2", "opt3"] = Field(  # noqa: N815
        json_schema_extra={"enumNames": ["Option One", "Option Two", "Option Three"]}
    )
    untitledMulti: list[Literal["option1", "option2", "option3"]]  # noqa: N815
    titledMulti: list[Literal["value1", "value2", "value3"]] = Field(  # noqa: N815
        json_schema_extra=_titled(CHOICES, "anyOf", multi=True)
    )


def ask_with_enums() -> Elicit[Enums]:
    return Elicit("Pick some options", Enums)


@server.tool(description="Ask for a form with each of the five kinds of enum (SEP-1330).")
def test_elicitation_sep1330_enums(answer: Annotated[ElicitationResult[Enums], Resolve(ask_with_enums)]) -> str:
    return "Elicitation completed: " + _said(answer)


@server.tool(description="Close the call's SSE stream, then answer after the client reconnects (SEP-1699).")
async def test_reconnection(ctx: Context) -> str:
    await ctx.close_sse_stream()
    await asyncio.sleep(0.2)
    return "Reconnection test completed successfully"


SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


@server.tool(description="Tool with JSON Schema 2020-12 features")
def json_schema_2020_12_tool(name: str = "", address: dict[str, str] | None = None) -> str:
    return f"name={name}, address={address}"


async def list_tools(ctx: ServerRequestContext, params: PaginatedRequestParams | None) -> ListToolsResult:
    # MCPServer derives each input schema from the function; this one must be the suite's, keyword for keyword.
    tools = await server.list_tools()
    for tool in tools:
        if tool.name == "json_schema_2020_12_tool":
            tool.input_schema = SCHEMA_2020_12
    return ListToolsResult(tools=tools)


# -- resources -------------------------------------------------------------------------------------


@server.resource("test://static-text", name="static-text", description="A static text.", mime_type="text/plain")
def static_text() -> str:
    return "This is the content of the static text resource."


@server.resource("test://static-binary", name="static-binary", description="A 1x1 PNG.", mime_type="image/png")
def static_binary() -> bytes:
    return base64.b64decode(PNG)


@server.resource("test://watched-resource", name="watched-resource", description="One to subscribe to.")
def watched() -> str:
    return "Watched resource content."


@server.resource(
    "test://template/{id}/data", name="template", description="Data for an id.", mime_type="application/json"
)
def template(id: str) -> str:
    return json.dumps({"id": id, "templateTest": True, "data": f"Data for ID: {id}"})


subscribed: set[str] = set()


async def subscribe(ctx: ServerRequestContext, params: SubscribeRequestParams) -> EmptyResult:
    subscribed.add(str(params.uri))
    return EmptyResult()


async def unsubscribe(ctx: ServerRequestContext, params: UnsubscribeRequestParams) -> EmptyResult:
    subscribed.discard(str(params.uri))
    return EmptyResult()


# -- prompts, completions, logging -------------------------------------------------------------------


@server.prompt(description="A prompt without arguments.")
def test_simple_prompt() -> str:
    return "This is a simple prompt for testing."


@server.prompt(description="A prompt with two arguments.")
def test_prompt_with_arguments(arg1: str, arg2: str) -> str:
    return f"Prompt with arguments: arg1='{arg1}', arg2='{arg2}'"


@server.prompt(description="A prompt embedding the resource it is given.")
def test_prompt_with_embedded_resource(resourceUri: str) -> list[Message]:  # noqa: N803 - the suite's name
    resource = TextResourceContents(
        uri=resourceUri, mime_type="text/plain", text="Embedded resource content for testing."
    )
    return [
        UserMessage(EmbeddedResource(type="resource", resource=resource)),
        UserMessage("Please process the embedded resource above."),
    ]


@server.prompt(description="A prompt with an image.")
def test_prompt_with_image() -> list[Message]:
    return [
        UserMessage(ImageContent(type="image", data=PNG, mime_type="image/png")),
        UserMessage("Please analyze the image above."),
    ]


@server.completion()
async def complete(
    ref: PromptReference | ResourceTemplateReference, argument: CompletionArgument, context: CompletionContext | None
) -> Completion | None:
    values = [v for v in ("paris", "park", "party", "test", "testing") if v.startswith(argument.value)]
    return Completion(values=values, total=len(values), has_more=False)


async def set_level(ctx: ServerRequestContext, params: SetLevelRequestParams) -> EmptyResult:
    level["now"] = params.level
    return EmptyResult()


lowlevel = server._lowlevel_server
lowlevel.add_request_handler("tools/list", PaginatedRequestParams, list_tools)
# MCPServer has no handlers for these (docs/mcp-sdk-notes: server-side pitfalls).
lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)
with warnings.catch_warnings():
    warnings.simplefilter("ignore", MCPDeprecationWarning)  # logging/setLevel is gone in the 2026 era
    lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, set_level)


class MemoryEventStore(EventStore):
    """Events kept in memory, so a client reconnecting with Last-Event-ID gets what it missed."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []
        self.ids = itertools.count(1)

    async def store_event(self, stream_id: str, message: Any) -> str:
        event_id = str(next(self.ids))
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(self, last_event_id: str, send_callback: EventCallback) -> str | None:
        stream = next((s for e, s, _ in self.events if e == last_event_id), None)
        if stream is None:
            return None
        after = False
        for event_id, stream_id, message in self.events:
            if after and stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
            after = after or event_id == last_event_id
        return stream


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("port", type=int)
    args = parser.parse_args()
    app = server.streamable_http_app(host="127.0.0.1", event_store=MemoryEventStore(), retry_interval=500)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
