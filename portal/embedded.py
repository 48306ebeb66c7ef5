"""The embedded mode's worker: real Celery worker threads inside the portal process.

The broker is in memory, so only a worker in the same process can receive the
tasks; `make run` and the embedded test suite start it through here.
"""

from __future__ import annotations

import atexit
import logging
import threading

from django.conf import settings
from django.db import DatabaseError

from portal.celery import app

log = logging.getLogger(__name__)


def start_worker(concurrency: int | None = None, hostname: str = "embedded@%h"):
    """Start a Celery worker on a thread pool, in a daemon thread; returns the WorkController."""
    # The worker (and with it the MCP SDK) loads only when this process is also the worker.
    from sessions.worker import forget_gone_local_workers

    try:
        forget_gone_local_workers()  # what a portal killed outright left showing "connected"
    except DatabaseError as exc:
        log.warning("could not clear the connection statuses of stopped workers: %s", exc)
    worker = app.WorkController(
        hostname=hostname,
        pool_cls="threads",
        concurrency=concurrency or settings.PORTAL_WORKER_THREADS,
        queues=[settings.CELERY_TASK_DEFAULT_QUEUE],
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        loglevel="WARNING",
    )
    thread = threading.Thread(target=worker.start, name="celery-embedded", daemon=True)
    thread.start()
    atexit.register(stop_worker, worker)
    return worker


def stop_worker(worker) -> None:
    """Stop the embedded worker: what is in flight ends as interrupted, then its threads and the pool stop.

    Called by runportal once Daphne has stopped, before the interpreter begins to exit: at exit
    Python first waits for every thread pool's threads (a call's waits on a form among them) and
    shuts the executors the pool loop's database work needs. Called again at exit, it does nothing.
    """
    # Loaded with the worker it stops (see start_worker).
    from sessions.actions import do_interrupt_approvals
    from sessions.worker import interrupt_calls, shutdown_pool

    if getattr(worker, "portal_stopped", False):
        return
    worker.portal_stopped = True
    interrupt_calls()
    try:
        # One process is the whole portal: nobody is left to answer an approval, nor a worker to run it.
        do_interrupt_approvals()
    except DatabaseError as exc:
        log.warning("could not end the approvals still waiting: %s", exc)
    try:
        # Waits for the task threads: each records how its call ended (interrupted, now).
        worker.stop(in_sighandler=False, exitcode=0)
    except Exception:  # noqa: BLE001 - stopping at exit must not mask the real exit
        log.debug("embedded worker stop failed", exc_info=True)
    shutdown_pool()
