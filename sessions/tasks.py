"""Celery tasks: each takes ids and hands over to one function in worker.py."""

from celery import shared_task
from celery.signals import worker_init, worker_process_shutdown, worker_shutdown

from . import credentials, oauth, worker


@shared_task(name="sessions.run_tool_call")
def run_tool_call(call_id: str) -> None:
    worker.execute_tool_call(call_id)


@shared_task(name="sessions.list_tools")
def list_tools(server_id: int, user_id: int, refresh: bool = False) -> None:
    worker.execute_list_tools(server_id, user_id, refresh)


@shared_task(name="sessions.test_connection")
def test_connection(server_id: int, user_id: int) -> None:
    worker.execute_test_connection(server_id, user_id)


@shared_task(name="sessions.authorize_server")
def authorize_server(flow_id: int, reply_channel: str) -> None:
    oauth.start_authorization(flow_id, reply_channel)


@worker_init.connect
def _on_worker_init(sender=None, **_kwargs) -> None:
    worker.start_heartbeat()
    credentials.start_listener(worker.get_pool())


@worker_shutdown.connect
@worker_process_shutdown.connect
def _on_worker_shutdown(sender=None, **_kwargs) -> None:
    # Close every MCP connection so no stdio child outlives its worker.
    worker.shutdown_pool()
