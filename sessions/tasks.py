"""Celery tasks: each takes ids and hands over to one function in worker.py."""

from celery import shared_task
from celery.signals import task_postrun, task_prerun, worker_init, worker_process_shutdown, worker_shutdown
from django.db import close_old_connections

from . import worker


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
    worker.start_heartbeat()


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
