"""Per-user rate limits on tool calls, counted in the Django cache.

The cache is Redis in the distributed mode, so every web process counts against the same
number; in the embedded mode there is one process and its memory cache. The count is a
sliding window over the last minute, estimated from two fixed one-minute buckets (this one,
and the last one weighted by how much of it still lies within the window), so a burst at
a bucket's edge cannot pass twice the limit.

A refused call is not started and not recorded: the limit exists to shed load, and writing a
row and an audit entry for every excess call would be the load. The browser is told why.
If the cache cannot be reached the call is let through (logged): a cache outage must not stop
every call in the portal.
"""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)

WINDOW = 60.0


class RateLimited(Exception):
    def __init__(self, limit: int, retry_after: float, what: str = "tool calls", per: str = "person"):
        seconds = max(1, math.ceil(retry_after))
        this = "call was not started" if what == "tool calls" else "request was not served"
        super().__init__(
            f"Too many {what}: at most {limit} a minute for each {per}. This {this}; try again in {seconds} s."
        )
        self.retry_after = seconds


def take_tool_call(user_id: int, now: float | None = None) -> None:
    """Count one tool call for the user; raise RateLimited (counting nothing) if over the limit."""
    _take(f"portal:calls:{user_id}", settings.PORTAL_TOOL_CALLS_PER_MINUTE, now, "tool calls", "person", "a tool call")


def take_endpoint_request(credential: str, now: float | None = None) -> None:
    """Count one request to the MCP endpoint for the credential (a token) that sent it."""
    limit = settings.PORTAL_ENDPOINT_REQUESTS_PER_MINUTE
    _take(f"portal:endpoint:{credential}", limit, now, "requests to the MCP endpoint", "token", "a request")


def _take(key: str, limit: int, now: float | None, what: str, per: str, one: str) -> None:
    if limit <= 0:
        return
    now = time.time() if now is None else now
    bucket = int(now // WINDOW)
    current_key = f"{key}:{bucket}"
    previous_key = f"{key}:{bucket - 1}"
    try:
        counts = cache.get_many([current_key, previous_key])
        previous, current = counts.get(previous_key, 0), counts.get(current_key, 0)
        elapsed = (now % WINDOW) / WINDOW
        if previous * (1 - elapsed) + current + 1 > limit:
            raise RateLimited(limit, _retry_after(previous, current, limit, elapsed), what, per)
        # Kept two windows long, so that the next bucket can still read this one.
        if not cache.add(current_key, 1, timeout=int(2 * WINDOW) + 5):
            cache.incr(current_key)
    except RateLimited:
        raise
    except Exception:  # noqa: BLE001 - an unreachable cache lets calls through rather than stop them all
        log.warning("could not count %s for the rate limit", one, exc_info=True)


def _retry_after(previous: int, current: int, limit: int, elapsed: float) -> float:
    """Seconds until one more call fits: later in this bucket, as the last one slides out, or in the next."""
    if previous and current + 1 <= limit:
        fits_at = 1 - (limit - current - 1) / previous
        return (fits_at - elapsed) * WINDOW
    return (1 - elapsed) * WINDOW
