"""`${VAR}` and `${VAR:-default}` in a server's command, args, env, url and headers.

Expanded from a sequence of sources (the portal's environment today; a user's own secrets
later, placed first so they win), only when a connection opens: the registry keeps the
references, never the values.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence

from .config import ServerConfig

_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")

Sources = Sequence[Mapping[str, str]]


class MissingVariable(Exception):
    """A `${NAME}` with no default that no source defines."""

    def __init__(self, name: str, where: str):
        super().__init__(f"${{{name}}} in the {where} is not set")
        self.name = name
        self.where = where


def lookup(name: str, sources: Sources) -> str | None:
    for source in sources:
        value = source.get(name)
        if value is not None:
            return value
    return None


def expand(text: str, sources: Sources, where: str = "configuration") -> str:
    """Replace every `${NAME}` / `${NAME:-default}` in `text`; raise MissingVariable for an unset one.

    As in the shell, `:-` also applies when the variable is set but empty.
    """

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = lookup(name, sources)
        if value:
            return value
        if default is not None:
            return default
        if value is not None:
            return value  # set but empty, and no default: empty it is
        raise MissingVariable(name, where)

    return _REFERENCE.sub(replace, text)


def references(text: str) -> list[str]:
    """The variable names `text` refers to (for forms and docs)."""
    return [match.group(1) for match in _REFERENCE.finditer(text)]


def expand_config(config: ServerConfig, sources: Sources | None = None) -> ServerConfig:
    """The config with its text fields expanded from `sources` (default: the config's own `variables`)."""
    sources = config.variables if sources is None else sources
    return dataclasses.replace(
        config,
        command=expand(config.command, sources, "command"),
        args=tuple(expand(arg, sources, f"argument {arg!r}") for arg in config.args),
        env={name: expand(value, sources, f"environment variable {name}") for name, value in config.env.items()},
        cwd=expand(config.cwd, sources, "working directory") if config.cwd else config.cwd,
        url=expand(config.url, sources, "URL"),
        headers={name: expand(value, sources, f"header {name}") for name, value in config.headers.items()},
    )
