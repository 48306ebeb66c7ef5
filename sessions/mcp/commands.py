"""The operator's optional allowlist of executables a stdio server may start.

An entry is a name looked up on PATH (`npx`) or a path (`/usr/bin/python3`). A command is
allowed when it resolves, on the PATH the child will get, to the same file as an entry
(symlinks followed on both sides). The allowlist limits which programs run, not what their
arguments tell them to do: allowing an interpreter allows any script it is given.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable


class CommandRefused(Exception):
    def __init__(self, command: str, allowed: Iterable[str]):
        listed = ", ".join(allowed)
        super().__init__(f"{command!r} is not among the executables this portal may start ({listed})")
        self.command = command


def resolve_command(command: str, path: str | None = None, cwd: str | None = None) -> str | None:
    """The real file `command` runs, as the child's PATH finds it; None if it finds none."""
    if not command:
        return None
    if os.sep in command:
        found = command if os.path.isabs(command) else os.path.join(cwd or os.getcwd(), command)
        if not (os.path.isfile(found) and os.access(found, os.X_OK)):
            return None
    else:
        found = shutil.which(command, path=path)
        if found is None:
            return None
    return os.path.realpath(found)


def allowed_command(
    command: str, allowed: Iterable[str], path: str | None = None, cwd: str | None = None
) -> str | None:
    """The resolved file to start, if `command` is allowed; raises CommandRefused if not.

    With an empty allowlist every command is allowed and None is returned (start it as given).
    """
    entries = [entry for entry in allowed if entry]
    if not entries:
        return None
    resolved = resolve_command(command, path, cwd)
    # Entries are the operator's: looked up on the portal's own PATH, never the server's `env`.
    if resolved is not None and any(resolve_command(entry) == resolved for entry in entries):
        return resolved
    raise CommandRefused(command, entries)
