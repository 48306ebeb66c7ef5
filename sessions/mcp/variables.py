"""`${VAR}`, `${VAR:-default}` and `${secret:NAME}` in a server's command, args, env, cwd, url and headers.

One grammar, expanded in one pass, only when a connection opens: the registry keeps the references,
never the values. What a reference is replaced with is never read again, so a member whose secret is
`${DJANGO_SECRET_KEY}` sends exactly that text, and a default is literal too.

- `${secret:NAME}`: the connecting user's (or the team's) own value (sessions/credentials.py).
- `${VAR}`: only a variable the operator exposes to servers (PORTAL_SERVER_VARIABLES); any other
  name is "not available to servers" and is never looked up in the portal's environment. An
  unexposed name with a `:-default` gets its default, as an unset variable would.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .config import ServerConfig

SECRET_NAME_CHARS = r"[A-Za-z_][A-Za-z0-9_.-]{0,99}"
REFERENCE = re.compile(
    r"\$\{(?:secret:(?P<secret>" + SECRET_NAME_CHARS + r")|(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?)\}"
)
SETTING = "PORTAL_SERVER_VARIABLES"


@dataclass(frozen=True)
class Reference:
    """One `${…}` as written: a secret's name, or a variable's name and its default (None: none given)."""

    name: str
    secret: bool = False
    default: str | None = None

    def __str__(self) -> str:
        if self.secret:
            return f"${{secret:{self.name}}}"
        return f"${{{self.name}}}" if self.default is None else f"${{{self.name}:-{self.default}}}"


class MissingVariable(Exception):
    """A `${NAME}` with no default that is exposed to servers but not set."""

    kind = "missing_variable"

    def __init__(self, name: str, where: str):
        super().__init__(f"${{{name}}} in the {where} is not set")
        self.name = name
        self.where = where


class VariableNotAvailable(MissingVariable):
    """A `${NAME}` the operator does not expose to servers: the portal's environment is not theirs."""

    kind = "variable_not_available"

    def __init__(self, name: str, where: str):
        Exception.__init__(self, not_available(name, where))
        self.name = name
        self.where = where


class MissingSecrets(Exception):
    """The config references secrets this user has not set."""

    def __init__(self, names: Iterable[str]):
        self.names = sorted(set(names))
        super().__init__("not set: " + ", ".join(self.names))


def not_available(name: str, where: str = "") -> str:
    place = f" in the {where}" if where else ""
    return f"${{{name}}}{place} is not available to servers (the operator exposes only the variables in {SETTING})"


def references(text: str) -> list[Reference]:
    """The references `text` holds, in order (for forms, the import page and the credentials page)."""
    return [
        Reference(match["secret"], secret=True)
        if match["secret"]
        else Reference(match["name"], False, match["default"])
        for match in REFERENCE.finditer(text)
    ]


def unavailable(text: str, exposed: Iterable[str]) -> list[str]:
    """The variable names in `text` that would not be filled: not exposed, and without a default."""
    allowed = set(exposed)
    found: list[str] = []
    for ref in references(text):
        if not ref.secret and ref.default is None and ref.name not in allowed and ref.name not in found:
            found.append(ref.name)
    return found


def expand(
    text: str,
    variables: Mapping[str, str | None],
    secrets: Mapping[str, str] | None = None,
    where: str = "configuration",
) -> str:
    """Replace every reference in `text`, in one pass.

    `variables` holds the exposed variables only (None: exposed but not set). As in the shell, `:-`
    also applies when a variable is set but empty. Raises VariableNotAvailable, MissingVariable or
    MissingSecrets.
    """
    secrets = secrets or {}

    def replace(match: re.Match[str]) -> str:
        if match["secret"] is not None:
            value = secrets.get(match["secret"])
            if value is None:
                raise MissingSecrets([match["secret"]])
            return value
        name, default = match["name"], match["default"]
        if name not in variables:
            if default is not None:
                return default
            raise VariableNotAvailable(name, where)
        value = variables[name]
        if value:
            return value
        if default is not None:
            return default
        if value is not None:
            return value  # set but empty, and no default: empty it is
        raise MissingVariable(name, where)

    return REFERENCE.sub(replace, text)


def texts(config: ServerConfig) -> Iterable[str]:
    """Every text field of a config that may hold references."""
    yield config.command
    yield from config.args
    yield from config.env.values()
    yield config.cwd or ""
    yield config.url
    yield from config.headers.values()


def referenced_secrets(config: ServerConfig) -> set[str]:
    return {ref.name for text in texts(config) for ref in references(text) if ref.secret}


def expand_config(config: ServerConfig) -> ServerConfig:
    """The config with every text field expanded from its own `variables` and `secrets`."""
    missing = referenced_secrets(config) - config.secrets.keys()
    if missing:
        raise MissingSecrets(missing)

    def fill(text: str, where: str) -> str:
        return expand(text, config.variables, config.secrets, where)

    return dataclasses.replace(
        config,
        command=fill(config.command, "command"),
        args=tuple(fill(arg, f"argument {arg!r}") for arg in config.args),
        env={name: fill(value, f"environment variable {name}") for name, value in config.env.items()},
        cwd=fill(config.cwd, "working directory") if config.cwd else config.cwd,
        url=fill(config.url, "URL"),
        headers={name: fill(value, f"header {name}") for name, value in config.headers.items()},
    )
