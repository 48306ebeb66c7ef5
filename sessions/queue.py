"""The one door to workers: every task is sent here, by name.

By name, so that what sends a task (a view, the consumer, an action) never imports the worker and
with it the MCP SDK, and so that messages already queued survive a move of the code that runs them.
Work for one person's session with a server goes to the worker holding that session
(sessions/affinity.py): a call, a resource read and an unsubscribe all reach the process that has the
connection, and no second connection opens elsewhere.
"""

from __future__ import annotations

from typing import Any

from portal.celery import app

from . import affinity


def send(task: str, args: tuple[Any, ...], worker: str = "", countdown: float | None = None) -> str:
    """Enqueue task `task` with `args` on `worker`'s own queue ("" for the shared one); returns the queue.

    A task sent to a worker that dies before running it is not lost: calls record the worker they
    were routed to, and the other workers' sweep sends them again to the shared queue
    (sessions/worker/liveness.py, Sweeper). Claiming a call is a compare-and-set, so a copy runs at most once.
    """
    queue = affinity.own_queue(worker) if worker else affinity.shared_queue()
    if app.conf.task_always_eager:
        # As apply_async does: run here and now (a process that is its own worker, e.g. the
        # conformance client's "Connect"). The tasks register when their module is imported,
        # which Celery's autodiscovery does only when asked.
        app.loader.import_default_modules()
        app.tasks[task].apply(args)
    else:
        app.send_task(task, args, queue=queue, countdown=countdown)
    return queue


def to_session(task: str, server: Any, user_id: int, *args: Any) -> str:
    """`task(server id, user id, *args)`, sent to the worker holding the person's session with `server`."""
    return send(task, (server.pk, user_id, *args), worker=affinity.route(server, user_id))
