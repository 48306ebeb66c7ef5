"""That this worker lives (the heartbeat /healthz and the router read), the sweep that ends or
resends the calls of workers that died, and the worker's stop."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, close_old_connections
from django.db.models import Q
from django.utils import timezone

from .. import actions, affinity, queue
from ..affinity import HEARTBEAT_KEY, WORKER_NAME
from ..models import Approval, ApprovalState, CallStatus, ConnectionStatus, ToolCall, task_running
from . import runtime
from .lane import close_lane

log = logging.getLogger(__name__)

_heartbeat: threading.Thread | None = None


def stop_heartbeat() -> None:
    """No more beats from this process until start_heartbeat(): the router stops sending work here.

    A beat under way ends first: it would otherwise write the heartbeat again after it is cleared,
    or still be in a database call while the interpreter exits."""
    runtime.stopping.set()
    heartbeat = _heartbeat
    if heartbeat is not None and heartbeat is not threading.current_thread():
        heartbeat.join(timeout=10)


def shutdown_pool() -> None:
    close_lane()  # calls handed over from now on go to Celery's queue, for the next worker
    runtime.interrupt_calls()  # in case the worker's stop did not say so first
    stop_heartbeat()
    try:
        affinity.stop()
    except Exception:  # noqa: BLE001 - the cache may be gone already; the TTL covers it
        log.debug("could not clear the heartbeat", exc_info=True)
    pool = runtime.take_pool()
    if pool is not None:
        if pool.started_loop is not None:
            # Interrupted above, the calls on the loop record their end: before their connections close.
            with contextlib.suppress(Exception):
                pool.run(runtime.calls_ended(30), timeout=35)
        pool.shutdown()
    try:
        # Closing each connection cleared its status already, unless its record was lost in the rush:
        # nothing of this worker may show "connected" once it is gone.
        actions.do_clear_connection_statuses(WORKER_NAME)
    except DatabaseError as exc:
        log.warning("could not clear the connection statuses of %s: %s", WORKER_NAME, exc)


def start_heartbeat(name: str = WORKER_NAME) -> threading.Thread:
    """Tell /healthz and the call router this worker is alive, every few seconds, from a thread of
    its own; and keep the sessions it holds routed to it (sessions/affinity.py)."""
    interval = settings.PORTAL_WORKER_HEARTBEAT_SECONDS
    runtime.stopping.clear()
    runtime.interrupting.clear()  # a worker started (again) runs calls

    sweeper = Sweeper(name)

    def beat() -> None:
        while not runtime.stopping.is_set():
            try:
                now = time.time()
                cache.set(HEARTBEAT_KEY, {"worker": name, "at": now}, timeout=affinity.heartbeat_ttl())
                affinity.beat(name)
                pool = runtime.current_pool()
                if pool is not None:
                    affinity.record(pool.keys(), name)
            except Exception:  # noqa: BLE001 - a cache outage must not kill the worker
                log.warning("worker heartbeat failed", exc_info=True)
            try:
                sweeper.sweep()
            except Exception:  # noqa: BLE001 - nor a database outage
                log.warning("the sweep for orphaned calls failed", exc_info=True)
            finally:
                close_old_connections()
            runtime.stopping.wait(interval)

    global _heartbeat
    thread = threading.Thread(target=beat, name="portal-heartbeat", daemon=True)
    thread.start()
    _heartbeat = thread
    return thread


class Sweeper:
    """Ends calls whose worker died, and sends again calls whose task was lost (run from the heartbeat).

    A worker counts as dead once its heartbeat has been missing for a whole heartbeat TTL as this
    worker saw it, and only while this worker's own heartbeat can be read: an emptied or
    unreachable cache (a Redis restart) must not look like every worker dying at once. A call
    still pending long after it was queued (its task lost with a broker restart) is queued again;
    claiming is a compare-and-set, so a copy that was not lost after all does nothing. Approvals
    past their time whose expiry task was lost the same way are ended.
    """

    def __init__(self, name: str = WORKER_NAME) -> None:
        self.name = name
        self.missing_since: dict[str, float] = {}
        self.resent: dict[str, float] = {}

    def sweep(self, now: float | None = None) -> dict[str, int]:
        now = time.monotonic() if now is None else now
        done = {"ended": 0, "resent": 0, "expired": 0}
        if not affinity.is_alive(self.name):
            self.missing_since.clear()  # what we cannot see, we do not judge
            return done
        ttl = affinity.heartbeat_ttl()
        # Running calls name the worker running them; pending ones the worker they were routed to.
        held = ToolCall.objects.filter(status__in=[CallStatus.RUNNING, CallStatus.PENDING]).exclude(worker="")
        # order_by(): the model's ordering would put created_at into the DISTINCT, a row per call.
        workers = set(held.order_by().values_list("worker", flat=True).distinct())
        for worker in workers:
            if worker == self.name or affinity.is_alive(worker):
                self.missing_since.pop(worker, None)
                continue
            first_missed = self.missing_since.setdefault(worker, now)
            if now - first_missed < ttl:
                continue
            for call_id, task in held.filter(worker=worker, status=CallStatus.RUNNING).values_list("pk", "task"):
                if task_running(task) and actions.do_hand_back_task_call(call_id, worker):
                    # Its server still runs the call's task: the next worker follows it.
                    done["resent"] += 1
                    log.warning(
                        "sent call %s to another worker: its worker %s stopped, its task runs on", call_id, worker
                    )
                elif actions.do_end_orphaned_call(call_id, worker) is not None:
                    done["ended"] += 1
                    log.warning("ended call %s: its worker %s stopped", call_id, worker)
            for call_id in actions.do_unroute_calls(worker):
                self._resend(str(call_id), now)
                done["resent"] += 1
                log.warning(
                    "sent call %s to the shared queue: its worker %s stopped before running it", call_id, worker
                )
        for gone in set(self.missing_since) - workers:
            del self.missing_since[gone]
        stale = timezone.now() - timedelta(seconds=settings.PORTAL_PENDING_RESEND_SECONDS)
        # A task call a stopping worker handed back (pending, unrouted, with its task's id): that
        # worker's own send may have reached a worker stopping too, which drops it, so it goes again
        # at the heartbeat's pace, not after minutes.
        handed_back = Q(worker="", task__has_key="id")
        waiting = ToolCall.objects.filter(Q(created_at__lt=stale) | handed_back, status=CallStatus.PENDING)
        for call_id, task in waiting.values_list("pk", "task")[:100]:
            key = str(call_id)
            every = ttl if task_running(task) else settings.PORTAL_PENDING_RESEND_SECONDS
            if now - self.resent.get(key, -1e9) < every:
                continue
            self._resend(key, now)
            done["resent"] += 1
        if len(self.resent) > 10_000:
            self.resent.clear()
        # Approvals whose expiry task was lost (it waits in the broker for its countdown).
        overdue = Approval.objects.filter(state=ApprovalState.PENDING, expires_at__lt=timezone.now())
        for approval_id in overdue.values_list("pk", flat=True)[:100]:
            actions.do_expire_approval(str(approval_id))
            done["expired"] += 1
        return done

    def _resend(self, call_id: str, now: float) -> None:
        self.resent[call_id] = now
        queue.start_call(call_id)


def forget_gone_local_workers() -> int:
    """Remove the connection statuses left by workers of this machine that no longer run (a portal
    killed outright cannot clear its own): after a restart no server shows "connected" with nothing
    open. Only for the embedded mode, where every worker is a process here (WORKER_NAME is host:pid)."""
    host = f"{WORKER_NAME.rsplit(':', 1)[0]}:"
    workers = ConnectionStatus.objects.filter(worker__startswith=host).values_list("worker", flat=True).distinct()
    gone = [name for name in workers.order_by() if not _process_runs(name.removeprefix(host))]
    return sum(actions.do_clear_connection_statuses(name) for name in gone)


def _process_runs(pid: str) -> bool:
    if not pid.isdigit():
        return True  # not a name this code made: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it runs, as someone else
    return True
