"""Celery tasks: each takes ids and hands over to one function in worker.py."""

from celery import shared_task
from celery.signals import worker_init, worker_process_shutdown, worker_shutdown

from . import affinity, worker


@shared_task(name="sessions.run_tool_call")
def run_tool_call(call_id: str) -> None:
    worker.execute_tool_call(call_id)


@shared_task(name="sessions.list_tools")
def list_tools(server_id: int, user_id: int, refresh: bool = False) -> None:
    worker.execute_list_tools(server_id, user_id, refresh)


@shared_task(name="sessions.test_connection")
def test_connection(server_id: int, user_id: int) -> None:
    worker.execute_test_connection(server_id, user_id)


@worker_init.connect
def _on_worker_init(sender=None, **_kwargs) -> None:
    # Besides the shared queue, each worker consumes a queue of its own, where the calls for the
    # sessions it holds are routed (sessions/affinity.py). Needs one process per worker (-P threads).
    if sender is not None:
        sender.app.amqp.queues.select_add(affinity.own_queue())
    worker.start_heartbeat()


@worker_shutdown.connect
@worker_process_shutdown.connect
def _on_worker_shutdown(sender=None, **_kwargs) -> None:
    # Close every MCP connection so no stdio child outlives its worker.
    worker.shutdown_pool()
