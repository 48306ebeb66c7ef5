"""Which commands a stdio server may start, and which environment names it may not set.

The operator's list (PORTAL_STDIO_COMMANDS) holds entries of two forms, written like a shell
command line (quotes work, words are split on spaces):

  npx                                 an executable alone: it, with any arguments
  /usr/bin/python3                    (a name is looked up on the portal's PATH, a path is taken as given)
  npx -y {package} ...                a template: npx, then -y, then one argument the team admin fills,
                                      then any further arguments
  uvx {package}                       exactly: uvx and one filled argument
  python3 -m tests.servers.{module}   a filled part may sit inside a word, after or before literal text

The words of a template after the executable:
  literal     must be that very argument
  {name}      a part the team admin fills: one or more letters, digits or . _ @ / : + = ~ -
              (no spaces, quotes, `$` or `${VAR}`), never containing `..`; the whole argument may
              not start with `-`, so a filled part never becomes an option of the executable
  ...         (the last word only) any further arguments, options included: they go to the server
              the template names, after it

The executable matches when the command is the very same word, or when both resolve, on the portal's
own PATH, to the same file (symlinks followed on both sides). An executable alone limits which program
runs, not what its arguments tell it to do: allowing an interpreter allows any script it is given.
Either way the server runs in the sandbox (sandbox.py); the list decides who may start what.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

REST = "..."
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
FILLED = r"[A-Za-z0-9._@/:+=~-]+"


class CommandRefused(Exception):
    def __init__(self, command: str, allowed: Iterable[str]):
        listed = ", ".join(allowed) or "none"
        super().__init__(f"{command!r} is not among the commands this portal allows ({listed})")
        self.command = command


class EnvRefused(Exception):
    def __init__(self, names: Sequence[str]):
        # Sorted: the stored env's order is the database's (PostgreSQL's jsonb reorders keys).
        self.names = sorted(names)
        super().__init__(
            "the environment may not set " + ", ".join(self.names) + " (they change how a program starts: "
            "docs/security.md, stdio servers)"
        )


@dataclass(frozen=True)
class CommandTemplate:
    """One entry of the operator's list, parsed: the executable and what may follow it."""

    text: str
    executable: str
    words: tuple[str, ...] = ()
    rest: bool = True  # further arguments allowed (an executable alone: any)

    @classmethod
    def parse(cls, text: str) -> CommandTemplate:
        words = shlex.split(text)
        if not words:
            raise ValueError("an empty command template")
        executable, *pattern = words
        if len(words) == 1:
            return cls(text, executable)
        rest = pattern[-1] == REST
        if rest:
            pattern.pop()
        for word in pattern:
            if word == REST:
                raise ValueError(f"{text!r}: '...' may only be the last word")
            if PLACEHOLDER.sub("", word).count("{") or PLACEHOLDER.sub("", word).count("}"):
                raise ValueError(f"{text!r}: write a filled part as {{name}}")
        return cls(text, executable, tuple(pattern), rest)

    def matches_args(self, args: Sequence[str]) -> bool:
        if len(args) < len(self.words) or (not self.rest and len(args) != len(self.words)):
            return False
        return all(_word_matches(word, arg) for word, arg in zip(self.words, args, strict=False))


def _word_matches(word: str, arg: str) -> bool:
    if not PLACEHOLDER.search(word):
        return word == arg
    pattern = "".join(
        f"({FILLED})" if index % 2 else re.escape(part) for index, part in enumerate(PLACEHOLDER.split(word))
    )
    match = re.fullmatch(pattern, arg)
    return match is not None and not arg.startswith("-") and not any(".." in part for part in match.groups())


def parse_templates(entries: Iterable[str]) -> list[CommandTemplate]:
    return [CommandTemplate.parse(entry) for entry in entries if entry.strip()]


def find_executable(command: str, path: str | None = None, cwd: str | None = None) -> str | None:
    """The absolute path `command` runs from, as `path` (a PATH) finds it; None if it finds none.

    Not resolved through symlinks: a virtualenv's python must be started by its own name.
    """
    if not command:
        return None
    if os.sep in command:
        found = command if os.path.isabs(command) else os.path.join(cwd or os.getcwd(), command)
        if not (os.path.isfile(found) and os.access(found, os.X_OK)):
            return None
        return os.path.abspath(found)
    found = shutil.which(command, path=path)
    return os.path.abspath(found) if found else None


def resolve_command(command: str, path: str | None = None, cwd: str | None = None) -> str | None:
    """The real file `command` runs (symlinks followed), as `path` finds it; None if it finds none."""
    found = find_executable(command, path, cwd)
    return os.path.realpath(found) if found else None


def _same_executable(command: str, entry: str, path: str | None, cwd: str | None) -> bool:
    if command == entry:
        return True
    resolved = resolve_command(command, path, cwd)
    # Entries are the operator's: looked up on the portal's own PATH.
    return resolved is not None and resolve_command(entry, path) == resolved


def command_allowed(
    command: str,
    args: Sequence[str],
    allowed: Iterable[str],
    path: str | None = None,
    cwd: str | None = None,
) -> bool:
    """Whether `command args` fits one entry of the operator's list (an empty list allows nothing)."""
    return any(
        template.matches_args(args) and _same_executable(command, template.executable, path, cwd)
        for template in parse_templates(allowed)
    )


def check_command(
    command: str,
    args: Sequence[str],
    allowed: Sequence[str] | None,
    path: str | None = None,
    cwd: str | None = None,
) -> None:
    """Raise CommandRefused unless the command fits the list; `allowed=None` means any command."""
    if allowed is None:
        return
    if not command_allowed(command, args, allowed, path, cwd):
        raise CommandRefused(shlex.join([command, *args]), [entry for entry in allowed if entry.strip()])


# -- the environment a server may set ------------------------------------------------------

# Names that make a program run something other than the command that was allowed, before or
# around it: the dynamic loader's (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT, ...), shells' startup
# files and options, Node's --require/--import and module path, the other interpreters' hooks,
# glibc's iconv modules, and PATH (the sandbox's PATH is the operator's). Every PYTHON* name but
# those that only change output, encoding and hashing (PYTHONSTARTUP, PYTHONPATH, PYTHONHOME,
# PYTHONINSPECT, PYTHONUSERBASE, PYTHONEXECUTABLE, PYTHONWARNINGS, which imports the module it
# names, PYTHONBREAKPOINT, which imports a callable, and names added by later Pythons).
REFUSED_ENV_NAMES = frozenset(
    {
        "PATH",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "NODE_OPTIONS",
        "NODE_PATH",
        "NODE_REPL_EXTERNAL_MODULE",
        "PERL5OPT",
        "PERL5LIB",
        "PERLLIB",
        "RUBYOPT",
        "RUBYLIB",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "GCONV_PATH",
    }
)
REFUSED_ENV_PREFIXES = ("LD_", "PYTHON")
HARMLESS_PYTHON_NAMES = frozenset(
    {"PYTHONUNBUFFERED", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED"}
)


def refused_env_names(env: Mapping[str, str] | Iterable[str]) -> list[str]:
    """The names of `env` a server may not set, in the order given."""
    return [
        name
        for name in env
        if name in REFUSED_ENV_NAMES or (name.startswith(REFUSED_ENV_PREFIXES) and name not in HARMLESS_PYTHON_NAMES)
    ]


def check_env(env: Mapping[str, str]) -> None:
    refused = refused_env_names(env)
    if refused:
        raise EnvRefused(refused)
