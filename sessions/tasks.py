"""Celery tasks: each takes ids and hands over to one function of the worker (sessions/worker/) or one action."""

from celery import shared_task
from celery.signals import (
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_shutdown,
    worker_shutdown,
    worker_shutting_down,
)
from django.db import close_old_connections

from . import actions, affinity, credentials, oauth_flow, worker


@shared_task(name="sessions.run_tool_call")
def run_tool_call(call_id: str) -> None:
    worker.execute_tool_call(call_id)


@shared_task(name="sessions.expire_approval")
def expire_approval(approval_id: str) -> None:
    # Countdowns can fire a little early; check again when the approval is really due.
    left = actions.do_expire_approval(approval_id)
    if left is not None:
        expire_approval.apply_async((approval_id,), countdown=left)


@shared_task(name="sessions.list_tools")
def list_tools(server_id: int, user_id: int, refresh: bool = False) -> None:
    worker.execute_list_tools(server_id, user_id, refresh)


@shared_task(name="sessions.test_connection")
def test_connection(server_id: int, user_id: int) -> None:
    worker.execute_test_connection(server_id, user_id)


@shared_task(name="sessions.list_resources")
def list_resources(server_id: int, user_id: int, ref: str | int | None = None) -> None:
    worker.execute_list_resources(server_id, user_id, ref)


@shared_task(name="sessions.read_resource")
def read_resource(server_id: int, user_id: int, uri: str, ref: str | int | None = None) -> None:
    worker.execute_read_resource(server_id, user_id, uri, ref)


@shared_task(name="sessions.list_prompts")
def list_prompts(server_id: int, user_id: int, ref: str | int | None = None) -> None:
    worker.execute_list_prompts(server_id, user_id, ref)


@shared_task(name="sessions.get_prompt")
def get_prompt(server_id: int, user_id: int, name: str, arguments: dict, ref: str | int | None = None) -> None:
    worker.execute_get_prompt(server_id, user_id, name, arguments, ref)


@shared_task(name="sessions.complete")
def complete(
    server_id: int, user_id: int, target: dict, argument: str, value: str, context: dict, ref: str | int | None = None
) -> None:
    worker.execute_complete(server_id, user_id, target, argument, value, context, ref)


@shared_task(name="sessions.subscribe_resource")
def subscribe_resource(server_id: int, user_id: int, uri: str, subscriber: str, ref: str | int | None = None) -> None:
    worker.execute_subscribe_resource(server_id, user_id, uri, subscriber, ref)


@shared_task(name="sessions.unsubscribe_resource")
def unsubscribe_resource(server_id: int, user_id: int, uri: str, subscriber: str, ref: str | int | None = None) -> None:
    worker.execute_unsubscribe_resource(server_id, user_id, uri, subscriber, ref)


@shared_task(name="sessions.authorize_server")
def authorize_server(flow_id: int, reply_channel: str) -> None:
    oauth_flow.start_authorization(flow_id, reply_channel)


@worker_init.connect
def _on_worker_init(sender=None, **_kwargs) -> None:
    # Besides the shared queue, each worker consumes a queue of its own, where the calls for the
    # sessions it holds are routed (sessions/affinity.py). Needs one process per worker (-P threads).
    if sender is not None:
        sender.app.amqp.queues.select_add(affinity.own_queue())
    worker.start_heartbeat()
    credentials.start_listener(worker.get_pool())
    worker.open_lane()  # warm calls straight to this worker (sessions/worker/lane.py)


@worker_shutting_down.connect
def _on_worker_shutting_down(sender=None, **_kwargs) -> None:
    # Sent as the warm shutdown begins, before Celery waits for the running tasks: the calls they run
    # end now, as interrupted, instead of holding the stop until every open form times out.
    worker.interrupt_calls()


@worker_shutdown.connect
@worker_process_shutdown.connect
def _on_worker_shutdown(sender=None, **_kwargs) -> None:
    # Close every MCP connection so no stdio child outlives its worker.
    worker.shutdown_pool()


@task_prerun.connect
@task_postrun.connect
def _check_database_connections(sender=None, **_kwargs) -> None:
    # What a request does for a view: drop a connection that broke or outlived CONN_MAX_AGE,
    # keep a good one (settings.CELERY_DB_REUSE_MAX stops Celery from closing them all).
    close_old_connections()
