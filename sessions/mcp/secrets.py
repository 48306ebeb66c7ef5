"""The secrets a connection used, kept out of everything its server says, and out of the logs.

An admin writes `Authorization: Bearer ${secret:API_KEY}` (or an env value, an argument, a
URL query) once; each user sets their own API_KEY on "My credentials". The references are
filled in with the rest of the config's (sessions/mcp/variables.py, one grammar and one pass);
this module holds the secret names' grammar and the one scrubber: every string a server sends
back (results, errors, progress, logs, forms, sampling requests, tool lists, instructions,
stderr) passes it before it is stored or shown, so a server that echoes its API key shows
`${secret:API_KEY}` instead.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Mapping
from typing import Any, TypeVar

from .variables import SECRET_NAME_CHARS, MissingSecrets, referenced_secrets

SECRET_NAME = re.compile(r"^" + SECRET_NAME_CHARS + r"$")
# Values shorter than this are not redacted from text: "1" or "yes" would eat ordinary words.
MIN_REDACTED_LENGTH = 6

T = TypeVar("T")

__all__ = ["MIN_REDACTED_LENGTH", "SECRET_NAME", "MissingSecrets", "Scrubber", "redact", "referenced_secrets"]


class Scrubber:
    """Replaces known values (value → what stands in for it) in text, JSON-like data and dataclasses.

    Walks strings, dict keys and values, lists, tuples and dataclass fields, so a value inside a
    JSON string (escaped quotes and all) is found as the server sent it. With nothing to take out
    it hands every value back untouched, at no cost.
    """

    def __init__(self, replacements: Mapping[str, str] | None = None):
        values = sorted((v for v in (replacements or {}) if len(v) >= MIN_REDACTED_LENGTH), key=len, reverse=True)
        self._replacements = {value: (replacements or {})[value] for value in values}
        # Longest first, so a value that contains another is replaced whole.
        self._pattern = re.compile("|".join(map(re.escape, values))) if values else None

    @classmethod
    def of_secrets(cls, secrets: Mapping[str, str]) -> Scrubber:
        """For secrets by name: each value becomes its reference, `${secret:NAME}`."""
        return cls({value: f"${{secret:{name}}}" for name, value in secrets.items() if value})

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __or__(self, other: Scrubber) -> Scrubber:
        return Scrubber({**other._replacements, **self._replacements})

    def text(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(lambda match: self._replacements[match.group(0)], text)

    def __call__(self, value: T) -> T:
        if self._pattern is None:
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self._walk(key): self._walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self._walk(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self._walk(item) for item in value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            changes = {f.name: self._walk(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
            return dataclasses.replace(value, **changes)
        return value


def redact(text: str, secrets: Mapping[str, str]) -> str:
    """Text with every secret value replaced by its reference, longest first."""
    return Scrubber.of_secrets(secrets).text(text)


# -- keeping values out of logs ---------------------------------------------------------------------
#
# Values this process has decrypted, so no log record can carry them: a secret in a URL shows up
# in the SDK's and the HTTP library's debug lines. The record factory (not a handler filter)
# covers every handler, including ones added later by Celery or tests.

_known: dict[str, str] = {}  # value → name
_known_scrubber = Scrubber()
_installed = False


def remember(secrets: Mapping[str, str]) -> None:
    """Redact these values (name → value) from every log record of this process from now on."""
    global _installed, _known_scrubber
    fresh = {value: name for name, value in secrets.items() if value and len(value) >= MIN_REDACTED_LENGTH}
    if fresh.keys() - _known.keys():
        _known.update(fresh)
        _known_scrubber = Scrubber({value: f"${{secret:{name}}}" for value, name in list(_known.items())})
    if not _installed and _known:
        _installed = True
        previous = logging.getLogRecordFactory()

        def factory(*args: object, **kwargs: object) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            _redact_record(record)
            return record

        logging.setLogRecordFactory(factory)


def redact_known(text: str) -> str:
    """Text with every value this process has decrypted replaced by its reference."""
    return _known_scrubber.text(text)


def _redact_record(record: logging.LogRecord) -> None:
    scrub = _known_scrubber
    if not scrub:
        return
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a badly formatted record is the logging module's to report
        return
    cleaned = scrub.text(message)
    if cleaned != message:
        record.msg, record.args = cleaned, None
    if record.exc_info and not record.exc_text:
        text = logging.Formatter().formatException(record.exc_info)
        record.exc_text = scrub.text(text)
