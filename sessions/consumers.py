"""The playground's WebSocket: browser messages in, worker events out (docs/websocket-protocol.md)."""

from __future__ import annotations

import json
import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from servers.models import Server, ServerUnusable, usable_server

from . import actions, app_calls, events, limits, live, messages, queue
from .messages import MAX_SUBSCRIPTIONS, MessageError

logger = logging.getLogger(__name__)

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


class PlaygroundConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            # Accepted only to be closed: a refused handshake reaches the page as 1006, indistinguishable
            # from a network fault (the page would retry forever); 4401 tells it to log in again.
            await self.accept()
            await self.close(code=4401)
            return
        self.user = user
        self.group = events.user_group(user.pk)
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
            await self._to_session("sessions.unsubscribe_resource", server_id, uri, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Every message is untrusted: anything malformed gets an error reply, never a closed socket.
        ref = None
        try:
            content = messages.load(text_data)
            ref = messages.ref(content)
            handler = self.handlers[messages.kind(content, self.handlers)]
            await handler(self, content, ref)
        except MessageError as exc:
            reply: dict[str, Any] = {"type": "error", "ref": ref, "message": str(exc)}
            if exc.kind:
                reply["kind"] = exc.kind
            if exc.errors:
                reply["errors"] = exc.errors
            await self.send_json(reply)
        except Exception:
            # A fault of the portal's, not of the message: logged once, here; the page hears that
            # this message failed (no traceback) and its socket stays open for the next one.
            logger.exception("The playground socket could not handle a message of user %s", self.user.pk)
            await self.send_json(
                {
                    "type": "error",
                    "ref": ref,
                    "kind": "internal",
                    "message": "The portal failed to handle this message; it was logged.",
                }
            )

    async def on_call(self, content: dict[str, Any], ref: Any) -> None:
        asked = messages.call(content)
        try:
            call = await database_sync_to_async(self._start_call)(asked)
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
        # Fields the browser adds (a "decision", an approval id) are ignored: the action decides.
        await self.send_json(
            {
                "type": "call.accepted",
                "ref": ref,
                "call": str(call.id),
                "server": call.server_id,
                "tool": call.tool,
                "status": call.status,
                **({"request_id": asked.request_id} if asked.request_id is not None else {}),
            }
        )
        if call.finished:
            await self.send_json({"type": "call.ended", "ref": ref, **call.as_event()})

    async def on_list_tools(self, content: dict[str, Any], ref: Any) -> None:
        refresh = messages.flag(content, "refresh")
        server = await self._usable_server(content)
        await self._to_session("sessions.list_tools", server, refresh)

    async def on_test_connection(self, content: dict[str, Any], ref: Any) -> None:
        server_id = messages.server_id(content)
        if not await self._can_administer(server_id):
            raise MessageError("Only the team's admins can test its servers.")
        await self._usable_server(content)
        await self._to_session("sessions.test_connection", server_id)

    async def on_cancel_call(self, content: dict[str, Any], ref: Any) -> None:
        call_id = messages.call_id(content)
        channel = await self._act(actions.do_running_call_channel, call_id)
        await self.channel_layer.send(channel, {"type": "call.cancel"})
        await self.send_json({"type": "cancel.sent", "ref": ref, "call": call_id})

    async def on_answer_elicitation(self, content: dict[str, Any], ref: Any) -> None:
        answer = messages.elicitation_answer(content)
        eid, action = answer.elicitation, answer.action
        channel, call_id = await self._act(actions.do_take_elicitation_answer, eid, action, answer.content)
        await self.channel_layer.send(
            channel, {"type": "elicitation.answer", "elicitation": eid, "action": action, "content": answer.content}
        )
        # To every page of the person: the form closes in each tab that shows it, not only in this one.
        await self._tell_pages({"type": "elicitation.answered", "ref": ref, "call": call_id, "elicitation": eid})

    async def on_answer_sampling(self, content: dict[str, Any], ref: Any) -> None:
        answer = messages.sampling_answer(content)
        sid, action = answer.sampling, answer.action
        channel, call_id = await self._act(actions.do_take_sampling_answer, sid, action, answer.text)
        await self.channel_layer.send(
            channel,
            {"type": "sampling.answer", "sampling": sid, "action": action, "text": answer.text, "model": answer.model},
        )
        await self._tell_pages({"type": "sampling.answered", "ref": ref, "call": call_id, "sampling": sid})

    # -- resources, prompts, completions: checked here, answered by a worker -----------------

    async def on_list_resources(self, content: dict[str, Any], ref: Any) -> None:
        server = await self._usable_server(content)
        await self._to_session("sessions.list_resources", server, ref)

    async def on_read_resource(self, content: dict[str, Any], ref: Any) -> None:
        server = await self._usable_server(content)
        await self._to_session("sessions.read_resource", server, messages.uri(content), ref)

    async def on_subscribe_resource(self, content: dict[str, Any], ref: Any) -> None:
        server = await self._usable_server(content)
        server_id = server.pk
        uri = messages.uri(content)
        if (server_id, uri) not in self.subscriptions and len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
            raise MessageError(f"A page may hold at most {MAX_SUBSCRIPTIONS} subscriptions.")
        # Asking again is harmless (the pool keeps a set of subscribers per URI), and retries one that failed.
        self.subscriptions.add((server_id, uri))
        await self._to_session("sessions.subscribe_resource", server, uri, self.channel_name, ref)

    async def on_unsubscribe_resource(self, content: dict[str, Any], ref: Any) -> None:
        server_id = messages.server_id(content)
        uri = messages.uri(content)
        if (server_id, uri) in self.subscriptions:
            self.subscriptions.discard((server_id, uri))
            await self._to_session("sessions.unsubscribe_resource", server_id, uri, self.channel_name, ref)
        else:
            await self.send_json({"type": "resource.unsubscribed", "ref": ref, "server": server_id, "uri": uri})

    async def on_list_prompts(self, content: dict[str, Any], ref: Any) -> None:
        server = await self._usable_server(content)
        await self._to_session("sessions.list_prompts", server, ref)

    async def on_get_prompt(self, content: dict[str, Any], ref: Any) -> None:
        server = await self._usable_server(content)
        await self._to_session("sessions.get_prompt", server, *messages.prompt(content), ref)

    async def on_complete(self, content: dict[str, Any], ref: Any) -> None:
        server = await self._usable_server(content)
        asked = messages.completion(content)
        await self._to_session(
            "sessions.complete", server, asked.target, asked.argument, asked.value, asked.context, ref
        )

    async def on_list_approvals(self, content: dict[str, Any], ref: Any) -> None:
        # The playground asks on every (re)connect, so a reload never loses a waiting approval.
        approvals = await database_sync_to_async(actions.do_pending_approval_events)(self.user)
        await self.send_json({"type": "approvals", "ref": ref, "approvals": approvals})

    async def on_list_calls(self, content: dict[str, Any], ref: Any) -> None:
        # Asked on every (re)connect too: a reloaded page or a second tab picks up the person's calls
        # in flight, with their progress and the forms and sampling requests still open.
        calls = await database_sync_to_async(live.in_flight)(self.user)
        await self.send_json({"type": "calls", "ref": ref, "calls": calls})

    async def on_list_server_log(self, content: dict[str, Any], ref: Any) -> None:
        # What the person's connection to the server logged outside any call, last lines first kept.
        server = await self._usable_server(content)
        lines = await database_sync_to_async(live.server_log)(server.pk, server.connection_owner(self.user.pk))
        await self.send_json({"type": "server.logs", "ref": ref, "server": server.pk, "lines": lines})

    async def on_answer_approval(self, content: dict[str, Any], ref: Any) -> None:
        await self._act(actions.do_answer_approval, *messages.approval_answer(content))

    handlers = {
        "call": on_call,
        "list_tools": on_list_tools,
        "test_connection": on_test_connection,
        "cancel_call": on_cancel_call,
        "answer_elicitation": on_answer_elicitation,
        "answer_sampling": on_answer_sampling,
        "list_resources": on_list_resources,
        "read_resource": on_read_resource,
        "subscribe_resource": on_subscribe_resource,
        "unsubscribe_resource": on_unsubscribe_resource,
        "list_prompts": on_list_prompts,
        "get_prompt": on_get_prompt,
        "complete": on_complete,
        "list_approvals": on_list_approvals,
        "list_calls": on_list_calls,
        "list_server_log": on_list_server_log,
        "answer_approval": on_answer_approval,
    }

    async def _act(self, action: Any, *args: Any) -> Any:
        """`action` (sessions/actions.py) for this person, on the database's thread; what it refuses
        goes back to the browser as the message's error."""
        try:
            return await database_sync_to_async(action)(self.user, *args)
        except actions.ApprovalError as exc:
            raise MessageError(str(exc)) from None
        except actions.AnswerError as exc:
            raise MessageError(str(exc), errors=exc.errors) from None

    def _start_call(self, asked: messages.Call) -> Any:
        # One trip to the database thread for both (each trip costs a thread hop and a connection check).
        limits.take_tool_call(self.user.pk)
        # An app's call (MCP Apps) is decided like the person's, recorded as the app's (sessions/app_calls.py).
        came = app_calls.came(asked.server, asked.app, asked.tool) if asked.app is not None else actions.PLAYGROUND
        return actions.do_start_tool_call(
            self.user, asked.server, asked.tool, asked.arguments, asked.request_id, came=came, as_task=asked.as_task
        )

    @database_sync_to_async
    def _to_session(self, task: str, server: Server | int, *args: Any) -> None:
        """To the worker holding this person's session with the server (sessions/queue.py), so that
        nothing opens a second connection elsewhere and an unsubscribe reaches its subscription.
        By id for a server that may be gone or disabled since (giving a subscription back)."""
        if isinstance(server, int):
            found = Server.objects.filter(pk=server).first()
            if found is None:
                queue.send(task, (server, self.user.pk, *args))
                return
            server = found
        queue.to_session(task, server, self.user.pk, *args)

    async def _usable_server(self, content: dict[str, Any]) -> Server:
        """The message's server, by the one check of every way of using a server (servers/models.py)."""
        server_id = messages.server_id(content)
        try:
            return await database_sync_to_async(usable_server)(server_id, self.user)
        except ServerUnusable as exc:
            raise MessageError(exc.message, exc.kind) from None

    @database_sync_to_async
    def _can_administer(self, server_id: int) -> bool:
        return Server.objects.administered_by(self.user).filter(pk=server_id).exists()

    async def _tell_pages(self, event: dict[str, Any]) -> None:
        """An event for every open page of this person (their group), this one included."""
        await events.publish(self.user.pk, event)

    async def portal_event(self, message: dict[str, Any]) -> None:
        text = json.dumps(message["event"])
        if len(text) > MAX_EVENT_BYTES:
            text = json.dumps(_shrunk(message["event"], len(text)))
        await self.send(text_data=text)
