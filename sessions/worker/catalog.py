"""What a person asks of a server outside a call: its tools, a test of the connection, resources,
prompts, completions, subscriptions. Each runs one pool request and answers with one event."""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from django.conf import settings

from servers import actions as server_actions
from servers.models import Server, ServerUnusable, usable_server
from servers.permissions import describe_tools

from .. import credentials, events
from ..mcp.config import ConnectionKey, ServerConfig
from ..mcp.failure import ConnectionFailed, Failure
from ..mcp.pool import ConnectionPool
from . import runtime, tool_call

log = logging.getLogger(__name__)

PoolWork = Callable[[ConnectionPool, ConnectionKey, ServerConfig], Coroutine[Any, Any, Any]]


def _with_credentials(server: Server, user_id: int, work: PoolWork) -> Any:
    """Run `work` on the pool as `user_id` connects to `server`: with their credentials, under the backstop.

    Returns the answer through the connection's scrubber, and raises ConnectionFailed with a
    diagnosis fit to show: secrets scrubbed, a server that asked for authorization remembered
    (sessions/credentials.py), the backstop's timeout as a failure too.
    """
    prepared = credentials.prepare(server, user_id)
    config = prepared.config
    pool = runtime.get_pool()
    backstop = config.connect_timeout + config.request_timeout + 30
    try:
        if prepared.failure is not None:
            raise ConnectionFailed(prepared.failure)
        return prepared.scrub(pool.run(runtime.stoppable(work(pool, prepared.key, config)), timeout=backstop))
    except runtime.Interrupted:
        raise ConnectionFailed(Failure("interrupted", "the portal stopped before the server answered")) from None
    except ConnectionFailed as exc:
        raise ConnectionFailed(credentials.settle_failure(server, user_id, prepared, exc.failure)) from None
    except concurrent.futures.TimeoutError:
        raise ConnectionFailed(Failure("timeout", f"the worker gave up after {backstop:g} s")) from None


def execute_list_tools(server_id: int, user_id: int, refresh: bool) -> None:
    try:
        server = usable_server(server_id, servers=Server.objects.select_related("team__policy"))
    except ServerUnusable as exc:
        runtime.publish(
            user_id, {"type": "tools", "server": server_id, "error": Failure(exc.kind, exc.message).as_dict()}
        )
        return
    try:
        tools = _with_credentials(server, user_id, lambda pool, key, config: pool.list_tools(key, config, refresh))
    except ConnectionFailed as exc:
        runtime.publish(user_id, {"type": "tools", "server": server_id, "error": exc.failure.as_dict()})
        return
    tools = tool_call.team_tools(server, tools)
    described = describe_tools(server, user_id, tools)
    runtime.publish(user_id, {"type": "tools", "server": server_id, "tools": tools, "described": described})


def execute_test_connection(server_id: int, user_id: int) -> None:
    try:
        server = usable_server(server_id)
    except ServerUnusable as exc:
        # Not recorded as the server's last test: nothing was tried.
        failure = Failure(exc.kind, exc.message).as_dict()
        runtime.publish(user_id, {"type": "connection.tested", "server": server_id, "ok": False, **failure})
        return
    try:
        # The admin tests with their own credentials, as any user would connect.
        info = _with_credentials(server, user_id, lambda pool, key, config: pool.probe(config))
    except ConnectionFailed as exc:
        result: dict[str, Any] = {"ok": False, **exc.failure.as_dict()}
    else:
        tool_call.team_tools(server, info.pop("tools"))
        negotiated = info.pop("negotiated", None)
        if negotiated and server.protocol == "auto":
            server_actions.do_record_negotiated(server_id, negotiated)
        result = {"ok": True, **info}
    # Stored for every admin of the team to read: scrubbed of every credential on the server.
    result = credentials.team_scrubber(server_id)(result)
    server_actions.do_record_test(server_id, result)
    runtime.publish(user_id, {"type": "connection.tested", "server": server_id, **result})


# -- resources, prompts, completions -----------------------------------------------------
#
# Each runs one pool request for (server, user) and publishes one event to the user's
# group: the answer, or `error` with the diagnosis. `ref` is the browser's, echoed back
# so a page can match answers to its questions.


def _on_server(
    server_id: int,
    user_id: int,
    event: dict[str, Any],
    work: PoolWork,
    ref: Any = None,
    record: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Run `work` against the server and publish `event` with its answer merged in (after `record`ing it)."""
    event = {**event, "server": server_id, "ref": ref}
    try:
        server = usable_server(server_id)
    except ServerUnusable as exc:
        runtime.publish(user_id, {**event, "error": Failure(exc.kind, exc.message).as_dict()})
        return
    try:
        data = _with_credentials(server, user_id, work)
    except ConnectionFailed as exc:
        runtime.publish(user_id, {**event, "error": exc.failure.as_dict()})
        return
    if record is not None:
        record(data)
    runtime.publish(user_id, {**event, **data})


def execute_list_resources(server_id: int, user_id: int, ref: Any = None) -> None:
    _on_server(
        server_id,
        user_id,
        {"type": "resources"},
        lambda pool, key, config: pool.list_resources(key, config),
        ref,
        record=lambda listing: server_actions.do_record_resource_counts(
            server_id, len(listing["resources"]), len(listing["templates"])
        ),
    )


def execute_read_resource(server_id: int, user_id: int, uri: str, ref: Any = None) -> None:
    _on_server(
        server_id,
        user_id,
        {"type": "resource.read", "uri": uri},
        lambda pool, key, config: pool.read_resource(key, config, uri),
        ref,
    )


def execute_list_prompts(server_id: int, user_id: int, ref: Any = None) -> None:
    _on_server(
        server_id,
        user_id,
        {"type": "prompts"},
        lambda pool, key, config: pool.list_prompts(key, config),
        ref,
        record=lambda listing: server_actions.do_record_prompt_count(server_id, len(listing["prompts"])),
    )


def execute_get_prompt(server_id: int, user_id: int, name: str, arguments: dict[str, str], ref: Any = None) -> None:
    _on_server(
        server_id,
        user_id,
        {"type": "prompt.got", "name": name},
        lambda pool, key, config: pool.get_prompt(key, config, name, arguments),
        ref,
    )


def execute_complete(
    server_id: int,
    user_id: int,
    target: dict[str, str],
    argument: str,
    value: str,
    context: dict[str, str],
    ref: Any = None,
) -> None:
    """Completion suggestions for an argument of a prompt (`{"prompt": name}`) or template (`{"template": uri}`)."""
    _on_server(
        server_id,
        user_id,
        {"type": "completion", **target, "argument": argument},
        lambda pool, key, config: pool.complete(key, config, target, argument, value, context),
        ref,
    )


def execute_subscribe_resource(server_id: int, user_id: int, uri: str, subscriber: str, ref: Any = None) -> None:
    """Subscribe `subscriber` (a browser socket's channel name) to `uri`; news goes to the user's group."""

    async def work(pool: ConnectionPool, key: ConnectionKey, config: ServerConfig) -> dict[str, Any]:
        scrub = credentials.scrubber_of(config)

        async def on_update(updated_uri: str, event: str, message: str) -> None:
            updated_uri, message = scrub((updated_uri, message))
            news = {"type": f"resource.{event}", "server": server_id, "uri": updated_uri}
            await events.publish(user_id, {**news, "message": message} if message else news)

        await pool.subscribe_resource(key, config, uri, on_update, subscriber)
        return {}

    _on_server(server_id, user_id, {"type": "resource.subscribed", "uri": uri}, work, ref)


def execute_unsubscribe_resource(server_id: int, user_id: int, uri: str, subscriber: str, ref: Any = None) -> None:
    # Letting go asks nothing of the server's row: not usable_server(), which would keep a
    # subscription made before the server was disabled or deleted for as long as its connection lives.
    pool = runtime.get_pool()
    try:
        pool.run(pool.unsubscribe_everywhere(server_id, uri, subscriber), timeout=settings.MCP_CONNECT_TIMEOUT)
    except concurrent.futures.TimeoutError:
        log.warning("server %s did not let go of %s in time; its connection keeps it until it closes", server_id, uri)
    runtime.publish(user_id, {"type": "resource.unsubscribed", "server": server_id, "uri": uri, "ref": ref})
