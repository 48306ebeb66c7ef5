"""The demo MCP server shipped with the portal, so a newcomer can try the playground at once.

Run it over stdio (`python -m sessions.mcp.demo_server`), Streamable HTTP
(`python -m sessions.mcp.demo_server http --port 8765`), legacy SSE (`sse`) or WebSocket
(`websocket`, subprotocol "mcp"). `--require-header NAME=VALUE` answers HTTP 401 to
requests without that header. It is also the test suite's real server: every tool here is
exercised end to end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import hashlib
import json
import os
import secrets
import struct
import subprocess
import sys
import zlib
from typing import Annotated, Any, Literal

from mcp.server.context import ServerRequestContext
from mcp.server.elicitation import AcceptedElicitation, ElicitationResult
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.prompts.base import AssistantMessage, Message, UserMessage
from mcp.server.mcpserver.resolve import Elicit, ListRoots, Resolve, Sample
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp.types import (
    CallToolResult,
    Completion,
    CompletionArgument,
    CompletionContext,
    CreateMessageResult,
    ElicitRequestURLParams,
    ElicitResult,
    EmptyResult,
    ImageContent,
    InputRequiredResult,
    ListResourcesResult,
    ListRootsResult,
    PaginatedRequestParams,
    PromptReference,
    ResourceLink,
    ResourceTemplateReference,
    SamplingMessage,
    SubscribeRequestParams,
    TextContent,
    ToolAnnotations,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field

from .apps import APP_MIME_TYPE
from .demo_tasks import Tasks, Work, current_task

# Tells this process from other copies of the server even where each is PID 2 of its own sandbox.
PROCESS_TOKEN = secrets.randbits(48)


async def _call_tool_as_task(name: str, arguments: dict[str, Any]) -> CallToolResult | InputRequiredResult:
    # A task's work runs after the request that made it has been answered: outside any request.
    return await server.call_tool(name, arguments)


# `research` may run as an MCP task, in both protocol eras (sessions/mcp/demo_tasks.py).
tasks = Tasks(["research"], _call_tool_as_task)

server = MCPServer(
    name="portal-demo",
    version="1.0.0",
    instructions=(
        "A demo server for the MCP Portal playground: echo, add, progress, an image, a form, a sleep, a note, "
        "big output, a chart with an app, a research task; resources (text, JSON, an image, bytes, a greeting "
        "template, a counter to subscribe to, the chart's app) and prompts."
    ),
    extensions=[tasks],
    middleware=[tasks.handshake_middleware],
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
    title="Ask for a contact, later (handshake era)",
    description="Wait `seconds`, then ask for a name and email in the middle of the call (an elicitation request).",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def ask_later(ctx: Context, topic: str, seconds: Annotated[float, Field(ge=0, le=60)] = 1) -> str:
    # The request comes while the call runs, not before it: other calls may have started meanwhile.
    await asyncio.sleep(seconds)
    answer = await ctx.elicit(f"Who should we contact about {topic}?", Contact)
    if isinstance(answer, AcceptedElicitation):
        return f"will contact {answer.data.name} <{answer.data.email}> about {topic}"
    return f"no contact given ({answer.action})"


def _titled(*options: tuple[str, str]) -> Any:
    # MCP's titled single-select: oneOf of {const, title}, instead of pydantic's bare enum.
    def extra(schema: dict[str, Any]) -> None:
        schema.pop("enum", None)
        schema["oneOf"] = [{"const": value, "title": title} for value, title in options]

    return extra


class Survey(BaseModel):
    """Every kind of field an elicitation form may hold (MCP's PrimitiveSchemaDefinition)."""

    name: str = Field(title="Name", min_length=2, max_length=40)
    email: str = Field(title="Email", json_schema_extra={"format": "email"})
    website: str = Field(default="https://example.org", title="Website", json_schema_extra={"format": "uri"})
    birthday: str = Field(title="Birthday", json_schema_extra={"format": "date"})
    meeting: str | None = Field(default=None, title="Meeting time", json_schema_extra={"format": "date-time"})
    age: int = Field(title="Age", ge=18, le=120)
    rating: float = Field(default=4.5, title="Rating", ge=0, le=5)
    subscribe: bool = Field(default=True, title="Subscribe")
    size: Literal["s", "m", "l"] = Field(
        default="m", title="Size", json_schema_extra=_titled(("s", "Small"), ("m", "Medium"), ("l", "Large"))
    )
    colour: Literal["red", "green", "blue"] = Field(title="Colour")
    toppings: list[Literal["cheese", "ham", "olives"]] = Field(
        default=["cheese"], title="Toppings", min_length=1, max_length=2
    )


def ask_survey() -> Elicit[Survey]:
    return Elicit("A few questions, one of each kind", Survey)


@server.tool(
    title="Survey",
    description="Ask for one field of every kind an elicitation form can hold, and answer with what came back.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def survey(answer: Annotated[ElicitationResult[Survey], Resolve(ask_survey)]) -> str:
    if isinstance(answer, AcceptedElicitation):
        return json.dumps(answer.data.model_dump(), sort_keys=True)
    return f"no answers ({answer.action})"


def ask_for_a_summary(text: str) -> Sample:
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize in one line: {text}"))],
        max_tokens=100,
        system_prompt="You write one-line summaries.",
    )


@server.tool(
    title="Summarize (sampling)",
    description="Ask the client's model (sampling/createMessage) for a one-line summary of the text.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def summarize(text: str, reply: Annotated[CreateMessageResult, Resolve(ask_for_a_summary)]) -> str:
    content = reply.content
    said = content.text if isinstance(content, TextContent) else str(content)
    return f"{reply.model} says: {said}"


CONSENT_URL = os.environ.get("DEMO_CONSENT_URL", "https://example.org/consent")


@server.tool(
    title="Connect an account (URL elicitation)",
    description="Send the user to a web page (URL-mode elicitation; handshake era), then say it is done.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def connect_account(ctx: Context, url: str = CONSENT_URL) -> str:
    answer = await ctx.elicit_url("Sign in to the demo service to connect your account.", url, "demo-connect")
    if answer.action != "accept":
        return f"not connected ({answer.action})"
    # The page "completed" at once: tell the client, as a real service would once the person is done.
    await ctx.request_context.session.send_elicit_complete("demo-connect", ctx.request_id)
    return "account connected"


_authorized: set[str] = set()


@server.tool(
    title="Needs authorization (-32042)",
    description="Fail with -32042 (URL elicitation required) the first time, succeed when called again.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def needs_authorization(account: str = "demo") -> str:
    if account not in _authorized:
        _authorized.add(account)
        raise UrlElicitationRequiredError(
            [
                ElicitRequestURLParams(
                    mode="url",
                    message=f"Authorize access to {account} first.",
                    url=f"{CONSENT_URL}?account={account}",
                    elicitation_id=f"authorize-{account}",
                )
            ]
        )
    return f"{account} is authorized"


def list_roots() -> ListRoots:
    return ListRoots()


@server.tool(
    title="Roots",
    description="Ask the client for its roots (roots/list) and answer with them.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def roots(listed: Annotated[ListRootsResult, Resolve(list_roots)]) -> dict[str, list[dict[str, str]]]:
    return {"roots": [{"uri": str(root.uri), "name": root.name or ""} for root in listed.roots]}


@server.tool(
    title="Link a resource",
    description="Answer with a resource_link to the demo's read-me (the client reads it with resources/read).",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def link() -> list:
    return [
        TextContent(type="text", text="Here is the read-me:"),
        ResourceLink(type="resource_link", uri="demo://readme", name="readme", title="Read me", mime_type="text/plain"),
    ]


@server.tool(
    title="Sleep",
    description="Sleep for the given number of seconds (try Cancel, or a short timeout).",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def sleep(ctx: Context, seconds: Annotated[float, Field(ge=0, le=3600)] = 5) -> str:
    # Says when it starts, so a test can cancel a call the server is surely running.
    await ctx.info(f"sleeping {seconds:g} s")
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        _note_event(f"sleep cancelled after less than {seconds} s")
        raise
    return f"slept {seconds} s"


def _note_event(note: str) -> None:
    """Proof that a cancellation reached the server: on stderr, and in a file tests can read."""
    print(note, file=sys.stderr, flush=True)
    if os.environ.get("DEMO_EVENT_LOG"):
        with open(os.environ["DEMO_EVENT_LOG"], "a") as events:
            events.write(note + "\n")


ANGLES = ("history", "science", "people")
ANGLE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"angle": {"type": "string", "title": "Angle", "enum": list(ANGLES)}},
    "required": ["angle"],
}
RESEARCH_STEPS = ("gathering sources", "reading", "taking notes", "checking facts", "drafting", "revising")


class Report(BaseModel):
    topic: str
    angle: str
    steps: int


class _InlineWork:
    """`Work` for a research call that is not a task: the request's own progress and elicitation."""

    def __init__(self, ctx: Context, total: int) -> None:
        self.ctx, self.total, self.done = ctx, total, 0

    async def report_status(self, message: str) -> None:
        await self.ctx.report_progress(self.done, self.total, message)
        self.done += 1

    async def elicit_form(self, message: str, requested_schema: dict[str, Any]) -> ElicitResult | None:
        session = self.ctx.request_context.session
        capabilities = session.client_capabilities
        # 2026-07-28 forbids server-to-client requests; a client without elicitation cannot answer one.
        if not session.can_send_request or capabilities is None or capabilities.elicitation is None:
            return None
        try:
            return await session.elicit_form(message, requested_schema, self.ctx.request_context.request_id)
        except MCPError:
            return None


@server.tool(
    title="Research a topic (runs as a task)",
    description=(
        "Research a topic in `steps` steps of `step_seconds` seconds. Runs as an MCP task where the client "
        "asks for one (or, in 2026-07-28, supports the tasks extension): status messages as it goes, and it can "
        "be cancelled. With `ask`, it asks which angle to take after the first step. Without a task it does "
        "the same work inline."
    ),
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def research(
    ctx: Context,
    topic: str,
    steps: Annotated[int, Field(ge=1, le=20)] = 4,
    step_seconds: Annotated[float, Field(ge=0, le=60)] = 1.0,
    ask: bool = False,
) -> Annotated[CallToolResult, Report]:
    work: Work = current_task() or _InlineWork(ctx, steps)
    angle = "general"
    step = 0
    try:
        for step in range(1, steps + 1):
            await work.report_status(f"Step {step} of {steps}: {RESEARCH_STEPS[(step - 1) % len(RESEARCH_STEPS)]}")
            await asyncio.sleep(step_seconds)
            if ask and step == 1:
                answer = await work.elicit_form(f"Which angle on {topic}?", ANGLE_SCHEMA)
                chosen = (
                    answer.content.get("angle") if answer and answer.action == "accept" and answer.content else None
                )
                # A decline, a cancel, or nobody to ask: a general report.
                angle = chosen if chosen in ANGLES else "general"
    except asyncio.CancelledError:
        # Proof that tasks/cancel (or a cancelled call) stopped the work itself, not only the task's status.
        _note_event(f"research on {topic} cancelled at step {step} of {steps}")
        raise
    return CallToolResult(
        content=[TextContent(type="text", text=f"Report on {topic} ({angle}): {steps} steps done.")],
        structured_content=Report(topic=topic, angle=angle, steps=steps).model_dump(),
    )


MAX_BIG_BYTES = 50 * 1024 * 1024


@server.tool(
    title="Big output",
    description="Return `size_bytes` bytes of text (at most 50 MB), to see how large results are handled.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def big(size_bytes: Annotated[int, Field(ge=0, le=MAX_BIG_BYTES)] = 1024 * 1024) -> str:
    line = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-=~!@#$%^&*()_+[]{};:,.<>/?|\n"
    return (line * (size_bytes // len(line) + 1))[:size_bytes]


@server.tool(
    title="Chatter",
    description="Log one message at each of debug, info, warning and error, then answer.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
async def chatter(ctx: Context, text: str = "hello") -> str:
    await ctx.debug(f"debug: {text}")
    await ctx.info(f"info: {text}")
    await ctx.warning(f"warning: {text}")
    await ctx.error(f"error: {text}")
    return f"logged {text!r} four times"


@server.tool(
    title="Fail",
    description="Raise an error inside the tool, to show how tool errors look.",
    annotations=ToolAnnotations(readOnlyHint=True),
)
def fail(reason: str = "it failed on purpose") -> str:
    raise ToolError(reason)


# The description can be set from outside, so a test (or a curious admin) can change the
# tool's definition between two calls and watch earlier approvals stop applying.
NOTE_DESCRIPTION = os.environ.get("DEMO_NOTE_DESCRIPTION") or "Save a short note; notes live until the server stops."
_notes: list[str] = []


@server.tool(
    title="Write a note",
    description=NOTE_DESCRIPTION,
    annotations=ToolAnnotations(readOnlyHint=False, destructiveHint=False),
)
def write_note(text: str) -> str:
    _notes.append(text)
    return f"saved note {len(_notes)}: {text}"


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


# -- resources ------------------------------------------------------------------------------

COUNTER_URI = "demo://counter"
touches = 0
# Handshake-era subscribers (resources/subscribe): uri -> the sessions that asked. In the
# 2026-07-28 era there is no subscribe request; subscriptions/listen streams get events instead.
subscribers: dict[str, set[Any]] = {}


@server.resource("demo://readme", name="readme", title="Read me", mime_type="text/plain")
def readme() -> str:
    return "This is the portal's demo server.\nIts resources show text, JSON, an image and plain bytes.\n"


@server.resource("demo://config.json", name="config", title="Settings (JSON)", mime_type="application/json")
def settings_json() -> str:
    return json.dumps({"theme": "dark", "retries": 3, "features": ["resources", "prompts"]})


@server.resource("demo://square.png", name="square", title="A green square", mime_type="image/png")
def square() -> bytes:
    return _png(16, 16, COLOURS["green"])


@server.resource("demo://bytes.bin", name="bytes", title="Some bytes", mime_type="application/octet-stream")
def some_bytes() -> bytes:
    return bytes(range(256))


@server.resource(
    COUNTER_URI,
    name="counter",
    title="Touch counter",
    description="How often touch_resource ran. Subscribe to it, then call touch_resource.",
    mime_type="text/plain",
)
def counter() -> str:
    return f"touched {touches} times"


@server.resource(
    "demo://greeting/{name}",
    name="greeting",
    title="A greeting",
    description="A greeting for anyone; the name has completions.",
    mime_type="text/plain",
)
def greeting(name: str) -> str:
    return f"Hello, {name}!"


PAGE_SIZE = 3


async def list_resources_in_pages(
    ctx: ServerRequestContext, params: PaginatedRequestParams | None
) -> ListResourcesResult:
    # MCPServer lists everything at once; pages of three exercise the client's cursor handling.
    everything = await server.list_resources()
    cursor = params.cursor if params is not None else None
    start = int(cursor) if cursor and cursor.isdigit() else 0
    end = start + PAGE_SIZE
    return ListResourcesResult(resources=everything[start:end], next_cursor=str(end) if end < len(everything) else None)


def _client_connection(ctx: ServerRequestContext):
    # ctx.session is a fresh proxy per request; the connection behind it is what stays the same.
    return ctx.session._connection


async def subscribe(ctx: ServerRequestContext, params: SubscribeRequestParams) -> EmptyResult:
    subscribers.setdefault(str(params.uri), set()).add(_client_connection(ctx))
    return EmptyResult()


async def unsubscribe(ctx: ServerRequestContext, params: UnsubscribeRequestParams) -> EmptyResult:
    subscribers.get(str(params.uri), set()).discard(_client_connection(ctx))
    return EmptyResult()


# MCPServer has no resources/subscribe handler of its own (docs/mcp-sdk-notes: server-side pitfalls).
server._lowlevel_server.add_request_handler("resources/list", PaginatedRequestParams, list_resources_in_pages)
server._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams, subscribe)
server._lowlevel_server.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, unsubscribe)


@server.tool(
    title="Touch a resource",
    description=f"Count one more touch on {COUNTER_URI} and tell its subscribers it changed.",
    annotations=ToolAnnotations(idempotentHint=False),
)
async def touch_resource(ctx: Context) -> str:
    global touches
    touches += 1
    await ctx.notify_resource_updated(COUNTER_URI)  # subscriptions/listen streams (2026-07-28)
    for connection in list(subscribers.get(COUNTER_URI, ())):  # resources/subscribe (handshake era)
        try:
            await connection.send_resource_updated(COUNTER_URI)
        except Exception:  # noqa: BLE001 - a subscriber that went away must not fail the tool
            subscribers[COUNTER_URI].discard(connection)
    return f"touched {touches} times"


# -- prompts and completions ------------------------------------------------------------------

NAMES = ["Ada", "Alan", "Alonzo", "Barbara", "Edsger", "Grace"]
LANGUAGES = ["python", "javascript", "rust", "go", "haskell"]


@server.prompt(title="Review code", description="Ask for a review of a piece of code.")
def review(code: str, language: str = "python", focus: str = "readability") -> list[Message]:
    return [
        UserMessage(f"Please review this {language} code, focusing on {focus}:\n\n{code}"),
        AssistantMessage(f"Happy to. I will look at the {language} code with {focus} in mind."),
    ]


@server.prompt(title="Say hello", description="A prompt without arguments.")
def hello() -> str:
    return "Say hello to the MCP Portal."


@server.completion()
async def complete(
    ref: PromptReference | ResourceTemplateReference, argument: CompletionArgument, context: CompletionContext | None
) -> Completion | None:
    typed = argument.value.lower()
    if isinstance(ref, ResourceTemplateReference) and ref.uri == "demo://greeting/{name}" and argument.name == "name":
        values = [name for name in NAMES if name.lower().startswith(typed)]
    elif isinstance(ref, PromptReference) and ref.name == "review" and argument.name == "language":
        values = [language for language in LANGUAGES if language.startswith(typed)]
    else:
        return None
    return Completion(values=values, total=len(values), has_more=False)


@server.tool(
    title="Spawn a child process",
    description="Start a child process that sleeps (stubborn: it ignores SIGINT and SIGTERM); returns its pid "
    "and this server's (in a sandbox, its PID namespace's) and a number that tells this server process from others.",
    annotations=ToolAnnotations(destructiveHint=False),
)
def spawn(stubborn: bool = False) -> dict[str, int]:
    ignore = "import signal; [signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)]; "
    code = (ignore if stubborn else "") + "import time; time.sleep(3600)"
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    return {"pid": child.pid, "server_pid": os.getpid(), "server_process": PROCESS_TOKEN}


def _extra_tool() -> str:
    """A tool that comes and goes with `toggle_tool`."""
    return "here"


@server.tool(
    title="Toggle a tool",
    description="Add or remove the tool `extra` and tell the client its tool list changed.",
    annotations=ToolAnnotations(readOnlyHint=False),
)
async def toggle_tool(ctx: Context) -> str:
    names = {tool.name for tool in await server.list_tools()}
    if "extra" in names:
        server.remove_tool("extra")
        state = "removed"
    else:
        server.add_tool(_extra_tool, name="extra", description="Appears and disappears with toggle_tool.")
        state = "added"
    # The handshake era sends a notification; 2026-07-28 publishes to subscriptions/listen streams.
    try:
        await ctx.notify_tools_changed()
    except Exception:  # noqa: BLE001 - not available in this era
        pass
    try:
        await ctx.request_context.session.send_tool_list_changed()
    except Exception:  # noqa: BLE001 - not available in this era
        pass
    return state


# -- an MCP App (docs/tasks-and-apps.md): a chart whose button calls the `add` tool back ----------

CHART_APP_URI = "ui://demo/chart.html"
# The app talks the MCP Apps bridge by hand (JSON-RPC over postMessage), as the extension allows: no SDK,
# no network (its resource declares no domains, so its sandbox allows none).
CHART_APP = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Numbers</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 12px; color: #1f2933; }
  h1 { font-size: 15px; margin: 0 0 8px; }
  .bars { display: flex; align-items: flex-end; gap: 6px; height: 110px; border-bottom: 1px solid #9aa5b1; }
  .bar { background: #2563eb; width: 30px; color: #fff; font-size: 11px; text-align: center; border-radius: 3px 3px 0 0; }
  .row { display: flex; gap: 8px; align-items: center; margin-top: 10px; flex-wrap: wrap; }
  input { width: 6em; }
  #status { min-height: 1.4em; color: #52606d; }
</style>
</head>
<body>
<h1>Numbers</h1>
<div class="bars" id="bars" role="img" aria-label="Bar chart of the numbers"></div>
<p>Total: <strong id="total">-</strong></p>
<div class="row">
  <label for="value">A new number</label>
  <input id="value" type="number" value="2" step="any">
  <button id="add" type="button">Add it (calls the add tool)</button>
</div>
<div class="row">
  <button id="readme" type="button">Read demo://readme</button>
  <button id="tell" type="button">Tell the playground</button>
  <button id="site" type="button">Open modelcontextprotocol.io</button>
</div>
<p id="status" role="status"></p>
<script>
  let nextId = 1;
  const waiting = new Map();
  const state = { values: [], total: 0 };
  const $ = (id) => document.getElementById(id);

  function request(method, params) {
    const id = nextId++;
    parent.postMessage({ jsonrpc: "2.0", id, method, params }, "*");
    return new Promise((resolve, reject) => waiting.set(id, { resolve, reject }));
  }
  function notify(method, params) {
    parent.postMessage({ jsonrpc: "2.0", method, params }, "*");
  }
  function say(text) {
    $("status").textContent = text;
    resized();
  }
  function resized() {
    notify("ui/notifications/size-changed", { height: document.documentElement.scrollHeight });
  }
  function draw() {
    const top = Math.max(1, ...state.values.map(Math.abs));
    $("bars").replaceChildren(...state.values.map((value) => {
      const bar = document.createElement("div");
      bar.className = "bar";
      bar.style.height = `${Math.max(4, (Math.abs(value) / top) * 100)}px`;
      bar.textContent = String(value);
      return bar;
    }));
    $("total").textContent = String(state.total);
    resized();
  }

  window.addEventListener("message", (event) => {
    if (event.source !== parent) return;
    const message = event.data;
    if (!message || message.jsonrpc !== "2.0") return;
    if (message.id !== undefined && message.method === undefined) {
      const pending = waiting.get(message.id);
      if (!pending) return;
      waiting.delete(message.id);
      if (message.error) pending.reject(new Error(message.error.message));
      else pending.resolve(message.result);
    } else if (message.method === "ui/notifications/tool-input") {
      say(`Called with ${JSON.stringify(message.params.arguments || {})}`);
    } else if (message.method === "ui/notifications/tool-result") {
      const data = message.params.structuredContent || {};
      state.values = Array.isArray(data.values) ? data.values : [];
      state.total = typeof data.total === "number" ? data.total : 0;
      draw();
    }
  });

  $("add").addEventListener("click", async () => {
    const value = Number($("value").value);
    say(`Asking the portal to call add(${state.total}, ${value})...`);
    try {
      const result = await request("tools/call", { name: "add", arguments: { a: state.total, b: value } });
      if (result.isError) {
        say(`The add tool failed: ${result.content?.[0]?.text || "no reason given"}`);
        return;
      }
      state.values.push(value);
      state.total = result.structuredContent.sum;
      draw();
      say(`add returned ${state.total}`);
    } catch (error) {
      say(`The portal refused the call: ${error.message}`);
    }
  });
  $("readme").addEventListener("click", async () => {
    try {
      const read = await request("resources/read", { uri: "demo://readme" });
      say(`The readme says: ${read.contents[0].text.split("\\n")[0]}`);
    } catch (error) {
      say(`Could not read it: ${error.message}`);
    }
  });
  $("tell").addEventListener("click", async () => {
    const text = `The chart's total is ${state.total}.`;
    await request("ui/message", { role: "user", content: [{ type: "text", text }] });
    say("Told the playground.");
  });
  $("site").addEventListener("click", async () => {
    const opened = await request("ui/open-link", { url: "https://modelcontextprotocol.io/" });
    say(opened.isError ? "The link was not opened." : "The link was opened.");
  });

  request("ui/initialize", {
    appInfo: { name: "portal-demo-chart", version: "1.0.0" },
    appCapabilities: {},
    protocolVersion: "2026-01-26",
  }).then(() => notify("ui/notifications/initialized", {}));
</script>
</body>
</html>
"""


@server.resource(
    CHART_APP_URI,
    name="chart-app",
    title="Numbers chart (an MCP App)",
    description="The chart tool's app: HTML the playground renders in a sandbox.",
    mime_type=APP_MIME_TYPE,
    meta={"ui": {"prefersBorder": True}},
)
def chart_app() -> str:
    return CHART_APP


@server.tool(
    title="Chart some numbers",
    description="Sum the numbers; the playground shows them as a chart (an MCP App) whose button calls add.",
    annotations=ToolAnnotations(readOnlyHint=True),
    meta={"ui": {"resourceUri": CHART_APP_URI}},
)
def chart(values: list[float] = [3, 1, 4, 1, 5]) -> dict[str, Any]:  # noqa: B006 - never changed
    return {"values": values, "total": sum(values)}


def _require_header(app, header: str):
    """Wrap an ASGI app: requests without `NAME: VALUE` get HTTP 401, as a server needing a token would."""
    name, _, value = header.partition("=")
    wanted = (name.strip().lower().encode(), value.strip().encode())

    async def guarded(scope, receive, send):
        if scope["type"] == "http" and wanted not in [(k.lower(), v) for k, v in scope.get("headers", [])]:
            await send({"type": "http.response.start", "status": 401, "headers": [(b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": b"unauthorized"})
            return
        await app(scope, receive, send)

    return guarded


def _serve_http(transport: str, host: str, port: int, require_header: str | None) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host) if transport == "http" else server.sse_app(host=host)
    if require_header:
        app = _require_header(app, require_header)
    uvicorn.run(app, host=host, port=port, log_level="warning")


async def _serve_websocket(host: str, port: int) -> None:
    """MCP over WebSocket: one JSON-RPC message per text frame, subprotocol "mcp"."""
    import anyio
    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter
    from websockets.asyncio.server import serve

    lowlevel = server._lowlevel_server

    async def handle(socket) -> None:
        read_writer, read_stream = anyio.create_memory_object_stream(0)
        write_stream, write_reader = anyio.create_memory_object_stream(0)

        async def receive() -> None:
            async with read_writer:
                async for frame in socket:
                    try:
                        await read_writer.send(SessionMessage(jsonrpc_message_adapter.validate_json(frame)))
                    except ValueError as exc:
                        await read_writer.send(exc)

        async def send() -> None:
            async with write_reader:
                async for message in write_reader:
                    await socket.send(
                        json.dumps(message.message.model_dump(by_alias=True, mode="json", exclude_unset=True))
                    )

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(receive)
                tg.start_soon(send)
                await lowlevel.run(read_stream, write_stream, lowlevel.create_initialization_options())
                tg.cancel_scope.cancel()
        except Exception:  # noqa: BLE001 - one client's broken socket must not stop the server
            pass

    async with serve(handle, host, port, subprotocols=["mcp"]) as ws_server:
        await ws_server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("transport", nargs="?", choices=["stdio", "http", "sse", "websocket"], default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--require-header", help="NAME=VALUE: answer HTTP 401 without it (http and sse)")
    args = parser.parse_args(argv)
    if args.transport == "stdio":
        server.run("stdio")
    elif args.transport == "websocket":
        asyncio.run(_serve_websocket(args.host, args.port))
    else:
        _serve_http(args.transport, args.host, args.port, args.require_header)


if __name__ == "__main__":
    main()
