"""What a tool call's decision reads, kept in each process: the person's usable servers (with their
team's policy) and a team's rules, correct by a generation number that every change bumps.

The number is one row in the database, bumped by triggers on every table those reads come from
(servers/migrations/0012_decision_generation.py), in the transaction that makes the change: a change
committed before a call starts is seen by that call, whichever process made it (a team admin's page,
another worker, a management command, SQL typed by hand). A lookup reads the number (one row by
primary key, in plain SQL: none of the ORM's work) and uses what this process cached under it; any
other number and it reads the rows again. The number is read before the rows, so what is cached
under a number is at least as new as the number. Only reads outside a transaction (a call's start,
the worker's check) use the cache.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DatabaseError, connection

log = logging.getLogger(__name__)
T = TypeVar("T")

GENERATION_TABLE = "servers_generation"
# Every table a decision reads, directly or through a join: a change to any of them bumps the number.
WATCHED_TABLES = (
    "servers_team",
    "servers_membership",
    "servers_server",
    "servers_teampolicy",
    "servers_permissionrule",
)
MAX_ENTRIES = 10_000

_cached: dict[tuple[Any, ...], tuple[int, Any]] = {}


def generation() -> int | None:
    """The number now, or None when it cannot be read (then nothing is served from the cache)."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT number FROM {GENERATION_TABLE} WHERE id = 1")  # noqa: S608 - a constant
            row = cursor.fetchone()
    except DatabaseError:
        log.debug("the decisions' generation could not be read", exc_info=True)
        return None
    return row[0] if row else None


def cached(key: tuple[Any, ...], read: Callable[[], T]) -> T:
    """`read()`, or what it returned under the current generation in this process.

    Inside a transaction nothing is cached or served: the number it sees may include its own
    changes, and a rollback takes them back, so the same number would come again for other rows."""
    if connection.in_atomic_block:
        return read()
    number = generation()
    if number is not None:
        hit = _cached.get(key)
        if hit is not None and hit[0] == number:
            return hit[1]
    value = read()
    if number is not None:
        if len(_cached) >= MAX_ENTRIES:
            _cached.clear()
        _cached[key] = (number, value)
    return value
