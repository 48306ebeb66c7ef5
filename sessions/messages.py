"""The playground's browser messages, checked: untrusted text in, a checked dict (and, per message type,
its checked fields) out, or a MessageError whose text goes back to the browser (docs/websocket-protocol.md).

Nothing here touches the database: whether the server may be used, and whether a form or a call exists,
is for the consumer and sessions/actions.py to say, after the message itself is sound.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

MAX_MESSAGE_BYTES = 1_000_000
# Objects and arrays inside one another, the message itself counting as one: enough for any tool's
# arguments, and far from the ~1,000 frames where Python's JSON encoder (the database's, the broker's)
# raises RecursionError.
MAX_DEPTH = 64
MAX_REF = 200
MAX_REQUEST_ID = 100
MAX_URI = 2048
MAX_SUBSCRIPTIONS = 50
MAX_SAMPLING_REPLY = 100_000

TOO_DEEP = f"The message is nested too deeply: at most {MAX_DEPTH} levels of objects and arrays."


class MessageError(Exception):
    """A browser message the portal will not act on; its text goes back to the browser, with `kind`
    and, for an answer that breaks a form's schema, the `errors` the form shows."""

    def __init__(self, message: str, kind: str = "", errors: list[dict[str, Any]] | None = None):
        super().__init__(message)
        self.kind = kind
        self.errors = errors or []


# -- the message as a whole ---------------------------------------------------------------


def load(text: str | None) -> dict[str, Any]:
    """The message, within its size, as a JSON object that every database stores."""
    if text is None:
        raise MessageError("Send JSON text frames.")
    # Characters first (cheap), then the UTF-8 bytes the limit is stated in.
    if len(text) > MAX_MESSAGE_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES:
        raise MessageError(f"Messages are limited to {MAX_MESSAGE_BYTES} bytes.")
    content = _load_json(text)
    if not isinstance(content, dict):
        raise MessageError("A message must be a JSON object with a 'type'.")
    return content


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _load_json(text: str) -> Any:
    """Python's parser also takes NaN and Infinity, and escapes for NUL or lone surrogates, which
    SQLite's and PostgreSQL's JSON columns refuse: those are refused here."""
    try:
        content = json.loads(text, parse_constant=_refuse_constant)
    except RecursionError:
        raise MessageError(TOO_DEEP) from None
    except ValueError:
        raise MessageError("The message is not valid JSON.") from None
    check_shape(content)
    try:
        json.dumps(content, ensure_ascii=False).encode("utf-8")  # a lone surrogate cannot be encoded
    except UnicodeEncodeError:
        raise MessageError("The message is not valid JSON.") from None
    return content


def check_shape(content: Any) -> None:
    """Depth within MAX_DEPTH and no NUL in any string: walked with a list, not by recursion,
    so no nesting can exhaust the stack."""
    stack = [(content, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                raise MessageError("The message contains a NUL character, which is not stored.")
        elif isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise MessageError(TOO_DEEP)
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                stack.append((key, depth))
                stack.append((item, depth + 1))


def ref(content: dict[str, Any]) -> str | int | None:
    """The browser's `ref`, echoed on answers: a short string or an integer, or absent."""
    value = content.get("ref")
    if value is None or (isinstance(value, str) and len(value) <= MAX_REF) or type(value) is int:
        return value
    raise MessageError(f"'ref' must be a string of at most {MAX_REF} characters or an integer.")


def kind(content: dict[str, Any], known: dict[str, Any]) -> str:
    """The message's `type`, one of `known`."""
    value = content.get("type")
    if isinstance(value, str) and value in known:
        return value
    shown = json.dumps(value)[:100] if isinstance(value, str) or value is None else "of the wrong kind"
    raise MessageError(f"Unknown message type {shown}: 'type' must name one of the messages.")


# -- fields -----------------------------------------------------------------------------


def server_id(content: dict[str, Any]) -> int:
    value = content.get("server")
    if isinstance(value, bool) or not isinstance(value, int):
        raise MessageError("'server' must be a server id (an integer).")
    return value


def flag(content: dict[str, Any], name: str) -> bool:
    value = content.get(name, False)
    if not isinstance(value, bool):
        raise MessageError(f"'{name}' must be true or false.")
    return value


def _text(content: dict[str, Any], name: str, limit: int, required: bool = True) -> str:
    value = content.get(name, "")
    if not isinstance(value, str) or len(value) > limit or (required and not value):
        raise MessageError(f"'{name}' must be a string of 1 to {limit} characters.")
    return value


def _strings(content: dict[str, Any], name: str, limit: int = 100_000, max_items: int = 100) -> dict[str, str]:
    """An optional object of string values: prompt arguments, completion context."""
    value = content.get(name, {})
    if (
        not isinstance(value, dict)
        or len(value) > max_items
        or not all(isinstance(k, str) and isinstance(v, str) and len(v) <= limit for k, v in value.items())
    ):
        raise MessageError(f"'{name}' must be an object of at most {max_items} string values.")
    return value


# -- each message's fields, in the order they are checked -----------------------------------


@dataclass(frozen=True)
class Call:
    server: int
    tool: str
    arguments: dict[str, Any]
    # The page's name for this intent: sent twice (a double Ctrl+Enter, a resend after a
    # reconnect), it answers with the first call's events instead of starting another.
    request_id: str | None
    # A call an MCP App in the page makes (its ui:// resource URI), None for the person's own.
    app: str | None = None
    # "Run as task": the person asks for an MCP task where the tool's taskSupport is "optional".
    as_task: bool = False


def call(content: dict[str, Any]) -> Call:
    server = server_id(content)
    tool = _text(content, "tool", 200)
    arguments = content.get("arguments", {})
    if not isinstance(arguments, dict):
        raise MessageError("'arguments' must be a JSON object.")
    request_id = _text(content, "request_id", MAX_REQUEST_ID) if "request_id" in content else None
    app = _text(content, "app", MAX_URI) if "app" in content else None
    if app is not None and not app.startswith("ui://"):
        raise MessageError("'app' must be the app's ui:// resource URI.")
    as_task = content.get("as_task", False)
    if not isinstance(as_task, bool):
        raise MessageError("'as_task' must be true or false.")
    return Call(server, tool, arguments, request_id, app, as_task)


def call_id(content: dict[str, Any]) -> str:
    """The call a Cancel names."""
    return _text(content, "call", 64)


@dataclass(frozen=True)
class ElicitationAnswer:
    elicitation: str
    action: str
    # The form's content when accepted (an empty object if none came), None otherwise.
    content: Any


def elicitation_answer(content: dict[str, Any]) -> ElicitationAnswer:
    elicitation = _text(content, "elicitation", 64)
    action = content.get("action")
    if action not in ("accept", "decline", "cancel"):
        raise MessageError("'action' must be accept, decline or cancel.")
    answer = content.get("content") if action == "accept" else None
    if action == "accept" and answer is None:
        answer = {}
    return ElicitationAnswer(elicitation, action, answer)


@dataclass(frozen=True)
class SamplingAnswer:
    sampling: str
    action: str
    # The reply and the model the person names, when approving; empty when declining.
    text: str
    model: str


def sampling_answer(content: dict[str, Any]) -> SamplingAnswer:
    sampling = _text(content, "sampling", 64)
    action = content.get("action")
    if action not in ("approve", "decline"):
        raise MessageError("'action' must be approve or decline.")
    approving = action == "approve"
    text = _text(content, "text", MAX_SAMPLING_REPLY) if approving else ""
    model = _text(content, "model", 200, required=False) if approving else ""
    return SamplingAnswer(sampling, action, text, model)


def uri(content: dict[str, Any]) -> str:
    """The resource a read, a subscribe or an unsubscribe names."""
    return _text(content, "uri", MAX_URI)


def prompt(content: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The prompt to get, by name, and its arguments."""
    return _text(content, "name", 200), _strings(content, "arguments")


@dataclass(frozen=True)
class Completion:
    target: dict[str, str]  # {"prompt": name} or {"template": uri template}
    argument: str
    value: str
    context: dict[str, str]


def completion(content: dict[str, Any]) -> Completion:
    if ("prompt" in content) == ("template" in content):
        raise MessageError("Say what to complete: a 'prompt' name or a resource 'template'.")
    target = {"prompt": _text(content, "prompt", 200)} if "prompt" in content else {}
    target = target or {"template": _text(content, "template", MAX_URI)}
    argument = _text(content, "argument", 200)
    value = _text(content, "value", 10_000, required=False)
    context = _strings(content, "context", limit=10_000)
    return Completion(target, argument, value, context)


def approval_answer(content: dict[str, Any]) -> tuple[str, str]:
    """The approval answered, and the answer (sessions/actions.py checks it is one of its answers)."""
    return _text(content, "approval", 64), _text(content, "answer", 20)
