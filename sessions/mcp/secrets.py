"""`${secret:NAME}` references in a server's config, filled in with the user's values at connect time.

An admin writes `Authorization: Bearer ${secret:API_KEY}` (or an env value, an argument, a
URL query) once; each user sets their own API_KEY on "My credentials". The worker expands
the references just before connecting; the stored config never holds the values.
Pure functions: the connections branch's `${VAR}` expansion can take these as one more source.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Iterable, Mapping

from .config import ServerConfig

SECRET_REF = re.compile(r"\$\{secret:([A-Za-z_][A-Za-z0-9_.-]{0,99})\}")
SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,99}$")
# Values shorter than this are not redacted from text: "1" or "yes" would eat ordinary words.
MIN_REDACTED_LENGTH = 6


class MissingSecrets(Exception):
    """The config references secrets this user has not set."""

    def __init__(self, names: Iterable[str]):
        self.names = sorted(set(names))
        super().__init__("not set: " + ", ".join(self.names))


def _texts(config: ServerConfig) -> Iterable[str]:
    yield config.url
    yield from config.args
    yield from config.headers.values()
    yield from config.env.values()


def referenced_secrets(config: ServerConfig) -> set[str]:
    return {match.group(1) for text in _texts(config) for match in SECRET_REF.finditer(text)}


def expand_secrets(config: ServerConfig, secrets: Mapping[str, str]) -> ServerConfig:
    """The config with every ${secret:NAME} replaced; raises MissingSecrets naming what is not set."""
    missing = referenced_secrets(config) - secrets.keys()
    if missing:
        raise MissingSecrets(missing)

    def fill(text: str) -> str:
        return SECRET_REF.sub(lambda match: secrets[match.group(1)], text)

    return dataclasses.replace(
        config,
        url=fill(config.url),
        args=tuple(fill(arg) for arg in config.args),
        headers={name: fill(value) for name, value in config.headers.items()},
        env={name: fill(value) for name, value in config.env.items()},
    )


def redact(text: str, secrets: Mapping[str, str]) -> str:
    """Text with every secret value replaced by its reference, longest first."""
    for name, value in sorted(secrets.items(), key=lambda item: -len(item[1])):
        if len(value) >= MIN_REDACTED_LENGTH and value in text:
            text = text.replace(value, f"${{secret:{name}}}")
    return text


# -- keeping values out of logs ---------------------------------------------------------------------
#
# Values this process has decrypted, so no log record can carry them: a secret in a URL shows up
# in the SDK's and the HTTP library's debug lines. The record factory (not a handler filter)
# covers every handler, including ones added later by Celery or tests.

_known: dict[str, str] = {}
_installed = False


def remember(secrets: Mapping[str, str]) -> None:
    """Redact these values (name → value) from every log record of this process from now on."""
    global _installed
    for name, value in secrets.items():
        if value and len(value) >= MIN_REDACTED_LENGTH:
            _known[value] = name
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
    if not _known or not text:
        return text
    return redact(text, {name: value for value, name in list(_known.items())})


def _redact_record(record: logging.LogRecord) -> None:
    known = {name: value for value, name in list(_known.items())}
    try:
        message = record.getMessage()
    except Exception:  # noqa: BLE001 - a badly formatted record is the logging module's to report
        return
    cleaned = redact(message, known)
    if cleaned != message:
        record.msg, record.args = cleaned, None
    if record.exc_info and not record.exc_text:
        text = logging.Formatter().formatException(record.exc_info)
        record.exc_text = redact(text, known)
