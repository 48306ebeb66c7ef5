"""The playground's WebSocket: browser messages in, worker events out (docs/websocket-protocol.md)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from servers.models import Server

from . import actions, affinity, tasks
from .mcp.elicitation import validate_answer
from .models import CallStatus, Elicitation, ElicitationState, ToolCall
from .worker import user_group

MAX_MESSAGE_BYTES = 1_000_000


class MessageError(Exception):
    """A browser message the portal will not act on; its text goes back to the browser."""

    errors: list[dict[str, Any]] = []


class InvalidAnswer(MessageError):
    """An elicitation answer that breaks the requested schema: not forwarded; the form shows why."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__("The answer does not match the form; nothing was sent.")
        self.errors = errors


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


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


class PlaygroundConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4401)
            return
        self.user = user
        self.group = user_group(user.pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Every message is untrusted: anything malformed gets an error reply, never a closed socket.
        ref = None
        try:
            if text_data is None:
                raise MessageError("Send JSON text frames.")
            if len(text_data) > MAX_MESSAGE_BYTES:
                raise MessageError(f"Messages are limited to {MAX_MESSAGE_BYTES} bytes.")
            try:
                content = json.loads(text_data)
            except ValueError:
                raise MessageError("The message is not valid JSON.") from None
            if not isinstance(content, dict):
                raise MessageError("A message must be a JSON object with a 'type'.")
            ref = content.get("ref") if isinstance(content.get("ref"), (str, int)) else None
            handler = self.handlers.get(content.get("type"))  # type: ignore[arg-type]
            if handler is None:
                raise MessageError(f"Unknown message type {content.get('type')!r}.")
            await handler(self, content, ref)
        except MessageError as exc:
            reply: dict[str, Any] = {"type": "error", "ref": ref, "message": str(exc)}
            if exc.errors:
                reply["errors"] = exc.errors
            await self.send_json(reply)

    async def on_call(self, content: dict[str, Any], ref: Any) -> None:
        server_id = _server_id(content)
        tool = _text(content, "tool", 200)
        arguments = content.get("arguments", {})
        if not isinstance(arguments, dict):
            raise MessageError("'arguments' must be a JSON object.")
        call = await database_sync_to_async(actions.do_start_tool_call)(self.user, server_id, tool, arguments)
        await self.send_json(
            {"type": "call.accepted", "ref": ref, "call": str(call.id), "server": call.server_id, "tool": tool}
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

    async def on_cancel(self, content: dict[str, Any], ref: Any) -> None:
        call_id = _text(content, "call", 64)
        channel = await self._running_call_channel(call_id)
        await self.channel_layer.send(channel, {"type": "call.cancel"})
        await self.send_json({"type": "cancel.sent", "ref": ref, "call": call_id})

    async def on_elicitation_answer(self, content: dict[str, Any], ref: Any) -> None:
        eid = _text(content, "elicitation", 64)
        action = content.get("action")
        if action not in ("accept", "decline", "cancel"):
            raise MessageError("'action' must be accept, decline or cancel.")
        answer = content.get("content") if action == "accept" else None
        if action == "accept" and answer is None:
            answer = {}
        channel, call_id = await self._answer(eid, action, answer, ref)
        await self.channel_layer.send(
            channel, {"type": "elicitation.answer", "elicitation": eid, "action": action, "content": answer}
        )
        await self.send_json({"type": "elicitation.answered", "ref": ref, "call": call_id, "elicitation": eid})

    handlers = {
        "call": on_call,
        "list_tools": on_list_tools,
        "test_connection": on_test_connection,
        "cancel": on_cancel,
        "elicitation.answer": on_elicitation_answer,
    }

    @database_sync_to_async
    def _running_call_channel(self, call_id: str) -> str:
        # Someone else's call and an unknown one get the same answer: ids are not for probing.
        call = ToolCall.objects.filter(pk=call_id, user=self.user).first() if _is_uuid(call_id) else None
        if call is None:
            raise MessageError("Unknown call.")
        if call.status != CallStatus.RUNNING:
            raise MessageError(f"The call is {call.status}, not running: there is nothing to cancel.")
        if not call.channel:
            raise MessageError("The call is starting; try again in a moment.")
        return call.channel

    @database_sync_to_async
    def _answer(self, eid: str, action: str, answer: Any, ref: Any) -> tuple[str, str]:
        """Check the answer against the schema that was asked for, record it once, and say where it goes."""
        found = Elicitation.objects.select_related("call").filter(pk=eid) if _is_uuid(eid) else None
        elicitation = found.first() if found is not None else None
        if elicitation is None or elicitation.call.user_id != self.user.pk:
            raise MessageError("Unknown elicitation.")
        if elicitation.state != ElicitationState.PENDING:
            raise MessageError(f"This form was already closed ({elicitation.get_state_display().lower()}).")
        if action == "accept":
            errors = validate_answer(elicitation.schema, answer)
            if errors:
                raise InvalidAnswer(errors)
        if not actions.do_answer_elicitation(elicitation.pk, action, answer):
            raise MessageError("This form was already closed.")
        return elicitation.call.channel, str(elicitation.call_id)

    def _send_list_tools(self, server_id: int, refresh: bool) -> None:
        # To the worker holding this user's session, so listing does not open a second one elsewhere.
        server = Server.objects.get(pk=server_id)
        key = affinity.connection_key_for(server, self.user.pk)
        affinity.send(tasks.list_tools, key, (server_id, self.user.pk, refresh))

    @database_sync_to_async
    def _can_see(self, server_id: int) -> bool:
        return Server.objects.visible_to(self.user).filter(pk=server_id).exists()

    @database_sync_to_async
    def _can_administer(self, server_id: int) -> bool:
        return Server.objects.administered_by(self.user).filter(pk=server_id).exists()

    async def portal_event(self, message: dict[str, Any]) -> None:
        await self.send_json(message["event"])
