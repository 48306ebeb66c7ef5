"""The playground's WebSocket: browser messages in, worker events out (docs/websocket-protocol.md)."""

from __future__ import annotations

import json
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from servers.models import Server

from . import actions, affinity, tasks
from .worker import user_group

MAX_MESSAGE_BYTES = 1_000_000


class MessageError(Exception):
    """A browser message the portal will not act on; its text goes back to the browser."""


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
            await self.send_json({"type": "error", "ref": ref, "message": str(exc)})

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

    handlers = {"call": on_call, "list_tools": on_list_tools, "test_connection": on_test_connection}

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
