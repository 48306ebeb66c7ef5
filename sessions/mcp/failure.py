"""Why a connection or call failed, as every part of the portal speaks of it.

Plain data, with nothing of the SDK: web processes read and show failures without loading the MCP
client. Turning an exception into one is sessions/mcp/errors.py's work.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Failure:
    """Why a connection or call failed. `kind` is stable (the UI and tests switch on it)."""

    kind: str
    message: str
    stderr_tail: str = ""
    status_code: int | None = None
    # What the person must do before a retry can work: the URL elicitations of an error -32042.
    elicitations: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class ConnectionFailed(Exception):
    """Raised by the pool when a server cannot be reached; carries the diagnosis."""

    def __init__(self, failure: Failure):
        super().__init__(failure.message)
        self.failure = failure
