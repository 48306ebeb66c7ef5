"""The embedded mode's broker: kombu's in-memory transport, woken by each new task instead of polling.

Kombu's memory transport finds new messages by polling: the worker sleeps `polling_interval`
whenever its queues are empty, so every call waited half an interval on average (2.5 ms at
5 ms) and idle worker threads woke 200 times a second. Here a put wakes the waiting worker
at once; the interval is only the backstop for a wake-up that raced past.
"""

from __future__ import annotations

import threading
from queue import Empty
from time import monotonic

from kombu.transport import memory

# Bumped on every put, so a worker that found its queues empty can tell whether a message
# arrived while it was looking (and not sleep through it).
_arrivals = threading.Condition()
_generation = 0


def _announce() -> None:
    global _generation
    with _arrivals:
        _generation += 1
        _arrivals.notify_all()


class Channel(memory.Channel):
    def _put(self, queue, message, **kwargs):
        super()._put(queue, message, **kwargs)
        _announce()

    def _put_fanout(self, exchange, message, routing_key=None, **kwargs):
        super()._put_fanout(exchange, message, routing_key, **kwargs)
        _announce()


class Transport(memory.Transport):
    Channel = Channel

    def drain_events(self, connection, timeout=None):
        started = monotonic()
        while True:
            seen = _generation
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                left = None if timeout is None else timeout - (monotonic() - started)
                if left is not None and left <= 0:
                    raise TimeoutError() from None  # socket.timeout, which kombu expects
                wait = self.polling_interval if left is None else min(self.polling_interval, left)
                with _arrivals:
                    if _generation == seen:
                        _arrivals.wait(wait)
