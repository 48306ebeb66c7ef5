"""The playground's WebSocket: browser messages in, worker events out (docs/websocket-protocol.md)."""

from __future__ import annotations

import json
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from servers.models import Server

from . import actions, affinity, limits, tasks
from .worker import user_group

MAX_MESSAGE_BYTES = 1_000_000
MAX_URI = 2048
MAX_SUBSCRIPTIONS = 50
# Daphne refuses to send a WebSocket message over 1 MiB and closes the socket (1011); an event that
# large (a huge result) goes without its large fields instead, saying so. The record keeps them.
MAX_EVENT_BYTES = 1_000_000
LARGE_FIELD = 10_000


def _shrunk(event: dict[str, Any], size: int) -> dict[str, Any]:
    kept = {k: v for k, v in event.items() if len(json.dumps(v)) <= LARGE_FIELD}
    dropped = sorted(set(event) - set(kept))
    where = " It is kept in the call's history." if event.get("type") == "call.ended" else ""
    kept["omitted"] = (
        f"Too large to send to the page ({size / 1_000_000:.1f} MB; the limit is {MAX_EVENT_BYTES / 1_000_000:g} MB): "
        f"{', '.join(dropped)} left out.{where}"
    )
    return kept


class MessageError(Exception):
    """A browser message the portal will not act on; its text goes back to the browser."""


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _server_id(content: dict[str, Any]) -> int:
    value = content.get("server")
    if isinstance(value, bool) or not isinstance(value, int):
        raise MessageError("'server' must be a server id (an integer).")
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


class PlaygroundConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.user = user
        self.group = user_group(user.pk)
        # Resource subscriptions this socket made, given back when it closes.
        self.subscriptions: set[tuple[int, str]] = set()
        try:
            await self.channel_layer.group_add(self.group, self.channel_name)
        except Exception:  # noqa: BLE001 - after a Redis restart the first use of a pooled connection fails
            await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)
        for server_id, uri in getattr(self, "subscriptions", ()):
            await database_sync_to_async(tasks.unsubscribe_resource.delay)(
                server_id, self.user.pk, uri, self.channel_name
            )

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Every message is untrusted: anything malformed gets an error reply, never a closed socket.
        ref = None
        try:
            if text_data is None:
                raise MessageError("Send JSON text frames.")
            if len(text_data) > MAX_MESSAGE_BYTES:
                raise MessageError(f"Messages are limited to {MAX_MESSAGE_BYTES} bytes.")
            try:
                # NaN and Infinity are not JSON (Python reads them anyway): no database can store them.
                content = json.loads(text_data, parse_constant=_not_json)
            except ValueError:
                raise MessageError("The message is not valid JSON.") from None
            if not isinstance(content, dict):
                raise MessageError("A message must be a JSON object with a 'type'.")
            if _has_nul(content):
                # PostgreSQL cannot store U+0000 in text or JSON: refused here rather than failing the write.
                raise MessageError("Messages may not contain the NUL character (\\u0000).")
            ref = content.get("ref") if isinstance(content.get("ref"), (str, int)) else None
            handler = self.handlers.get(content.get("type"))  # type: ignore[arg-type]
            if handler is None:
                raise MessageError(f"Unknown message type {content.get('type')!r}.")
            await handler(self, content, ref)
        except MessageError as exc:
            await self.send_json({"type": "error", "ref": ref, "message": str(exc)})

    async def on_call(self, content: dict[str, Any], ref: Any) -> None:
        server_id = _server_id(content)
        tool = _text(content, "tool", 200)
        arguments = content.get("arguments", {})
        if not isinstance(arguments, dict):
            raise MessageError("'arguments' must be a JSON object.")
        try:
            await database_sync_to_async(limits.take_tool_call)(self.user.pk)
        except limits.RateLimited as exc:
            # Not started and not recorded (sessions/limits.py says why); the page is told when to retry.
            await self.send_json(
                {
                    "type": "error",
                    "ref": ref,
                    "kind": "rate_limited",
                    "message": str(exc),
                    "retry_after": exc.retry_after,
                }
            )
            return
        call = await database_sync_to_async(actions.do_start_tool_call)(self.user, server_id, tool, arguments)
        # Fields the browser adds (a "decision", an approval id) are ignored: the action decides.
        await self.send_json(
            {
                "type": "call.accepted",
                "ref": ref,
                "call": str(call.id),
                "server": call.server_id,
                "tool": tool,
                "status": call.status,
            }
        )
        if call.finished:
            await self.send_json({"type": "call.ended", "ref": ref, **call.as_event()})

    async def on_list_tools(self, content: dict[str, Any], ref: Any) -> None:
        server_id = _server_id(content)
        if not await self._can_see(server_id):
            raise MessageError("Unknown server.")
        await database_sync_to_async(self._send_list_tools)(server_id, bool(content.get("refresh")))

    async def on_test_connection(self, content: dict[str, Any], ref: Any) -> None:
        server_id = _server_id(content)
        if not await self._can_administer(server_id):
            raise MessageError("Only the team's admins can test its servers.")
        await database_sync_to_async(tasks.test_connection.delay)(server_id, self.user.pk)

    # -- resources, prompts, completions: checked here, answered by a worker -----------------

    async def on_list_resources(self, content: dict[str, Any], ref: Any) -> None:
        server_id = await self._usable_server(content)
        await database_sync_to_async(tasks.list_resources.delay)(server_id, self.user.pk, ref)

    async def on_read_resource(self, content: dict[str, Any], ref: Any) -> None:
        server_id = await self._usable_server(content)
        uri = _text(content, "uri", MAX_URI)
        await database_sync_to_async(tasks.read_resource.delay)(server_id, self.user.pk, uri, ref)

    async def on_subscribe_resource(self, content: dict[str, Any], ref: Any) -> None:
        server_id = await self._usable_server(content)
        uri = _text(content, "uri", MAX_URI)
        if (server_id, uri) not in self.subscriptions and len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise MessageError(f"A page may hold at most {MAX_SUBSCRIPTIONS} subscriptions.")
        # Asking again is harmless (the pool keeps a set of subscribers per URI), and retries one that failed.
        self.subscriptions.add((server_id, uri))
        await database_sync_to_async(tasks.subscribe_resource.delay)(
            server_id, self.user.pk, uri, self.channel_name, ref
        )

    async def on_unsubscribe_resource(self, content: dict[str, Any], ref: Any) -> None:
        server_id = _server_id(content)
        uri = _text(content, "uri", MAX_URI)
        if (server_id, uri) in self.subscriptions:
            self.subscriptions.discard((server_id, uri))
            await database_sync_to_async(tasks.unsubscribe_resource.delay)(
                server_id, self.user.pk, uri, self.channel_name, ref
            )
        else:
            await self.send_json({"type": "resource.unsubscribed", "ref": ref, "server": server_id, "uri": uri})

    async def on_list_prompts(self, content: dict[str, Any], ref: Any) -> None:
        server_id = await self._usable_server(content)
        await database_sync_to_async(tasks.list_prompts.delay)(server_id, self.user.pk, ref)

    async def on_get_prompt(self, content: dict[str, Any], ref: Any) -> None:
        server_id = await self._usable_server(content)
        name = _text(content, "name", 200)
        arguments = _strings(content, "arguments")
        await database_sync_to_async(tasks.get_prompt.delay)(server_id, self.user.pk, name, arguments, ref)

    async def on_complete(self, content: dict[str, Any], ref: Any) -> None:
        server_id = await self._usable_server(content)
        if ("prompt" in content) == ("template" in content):
            raise MessageError("Say what to complete: a 'prompt' name or a resource 'template'.")
        target = {"prompt": _text(content, "prompt", 200)} if "prompt" in content else {}
        target = target or {"template": _text(content, "template", MAX_URI)}
        argument = _text(content, "argument", 200)
        value = _text(content, "value", 10_000, required=False)
        context = _strings(content, "context", limit=10_000)
        await database_sync_to_async(tasks.complete.delay)(
            server_id, self.user.pk, target, argument, value, context, ref
        )

    async def on_list_approvals(self, content: dict[str, Any], ref: Any) -> None:
        # The playground asks on every (re)connect, so a reload never loses a waiting approval.
        approvals = await database_sync_to_async(self._pending_approvals)()
        await self.send_json({"type": "approvals", "ref": ref, "approvals": approvals})

    async def on_answer_approval(self, content: dict[str, Any], ref: Any) -> None:
        approval = _text(content, "approval", 64)
        answer = _text(content, "answer", 20)
        try:
            await database_sync_to_async(actions.do_answer_approval)(self.user, approval, answer)
        except actions.ApprovalError as exc:
            raise MessageError(str(exc)) from None

    handlers = {
        "call": on_call,
        "list_tools": on_list_tools,
        "test_connection": on_test_connection,
        "list_resources": on_list_resources,
        "read_resource": on_read_resource,
        "subscribe_resource": on_subscribe_resource,
        "unsubscribe_resource": on_unsubscribe_resource,
        "list_prompts": on_list_prompts,
        "get_prompt": on_get_prompt,
        "complete": on_complete,
        "list_approvals": on_list_approvals,
        "answer_approval": on_answer_approval,
    }

    def _pending_approvals(self) -> list[dict[str, Any]]:
        return [approval.as_event() for approval in actions.do_list_pending_approvals(self.user)]

    def _send_list_tools(self, server_id: int, refresh: bool) -> None:
        # To the worker holding this user's session, so listing does not open a second one elsewhere.
        server = Server.objects.get(pk=server_id)
        key = affinity.connection_key_for(server, self.user.pk)
        affinity.send(tasks.list_tools, key, (server_id, self.user.pk, refresh))

    @database_sync_to_async
    def _can_see(self, server_id: int) -> bool:
        return Server.objects.visible_to(self.user).filter(pk=server_id).exists()

    async def _usable_server(self, content: dict[str, Any]) -> int:
        """The message's server, if the user can see it and it is enabled."""
        server_id = _server_id(content)
        found = await database_sync_to_async(
            lambda: Server.objects.visible_to(self.user).filter(pk=server_id).values_list("name", "enabled").first()
        )()
        if found is None:
            raise MessageError("Unknown server.")
        if not found[1]:
            raise MessageError(f"{found[0]} is disabled.")
        return server_id

    @database_sync_to_async
    def _can_administer(self, server_id: int) -> bool:
        return Server.objects.administered_by(self.user).filter(pk=server_id).exists()

    async def portal_event(self, message: dict[str, Any]) -> None:
        text = json.dumps(message["event"])
        if len(text) > MAX_EVENT_BYTES:
            text = json.dumps(_shrunk(message["event"], len(text)))
        await self.send(text_data=text)
