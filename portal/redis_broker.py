"""The distributed mode's broker: kombu's Redis transport, surviving a Redis restart.

When the connection to Redis drops while the worker holds messages it has not acknowledged yet
(prefetched calls, countdown copies, approval expiries), kombu 5.7 tries to put them back while
closing the channel, after it has already let go of its connection: an AttributeError that Celery
treats as unrecoverable, and the worker process exits (tests/faults/test_store_restarts.py). A
Redis that restarted empty has lost those messages anyway; the worker's sweep sends lost calls
again and ends overdue approvals (sessions/worker/liveness.py), so the worker logs it and goes on.
"""

from __future__ import annotations

import logging

from kombu.transport import redis

log = logging.getLogger(__name__)


class QoS(redis.QoS):
    def restore_unacked(self, client=None):
        try:
            return super().restore_unacked(client)
        except AttributeError:
            log.warning("could not put back %d unacknowledged message(s): the connection is gone", len(self._delivered))
            self._delivered.clear()
            return None


class Channel(redis.Channel):
    QoS = QoS


class Transport(redis.Transport):
    Channel = Channel
