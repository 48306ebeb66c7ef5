"""PORTAL_VAR_DIR holds what no other local user may read: the SQLite database with its WAL and
shared-memory files, the secret key and the encryption keys. The directory is 0700, the files 0600.

Modes are set when a file is made, not after: a reader who opens a file in the moment before a
chmod keeps the descriptor, and reads everything written later.
"""

from __future__ import annotations

import os
from pathlib import Path

SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


def private_directory(path: Path) -> Path:
    """Create `path` 0700; one of ours made with a wider mode (by an earlier version, or by hand) is tightened."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    stat = path.stat()
    if stat.st_mode & 0o077 and stat.st_uid == os.getuid():
        path.chmod(0o700)
    return path


def private_sqlite(path: Path) -> None:
    """Create the database file 0600 before SQLite opens it.

    SQLite would create it 0644 (less the umask), and gives its -wal and -shm files the mode of
    the database file, whatever the umask: a private database file makes private companions.
    Files left wider by an earlier version are tightened.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        return  # not ours to make (a read-only or foreign path): SQLite will say what is wrong
    try:
        if os.fstat(fd).st_mode & 0o077:
            os.fchmod(fd, 0o600)
    except PermissionError:
        pass  # someone else's file, shared on purpose
    finally:
        os.close(fd)
    for suffix in SQLITE_COMPANIONS:
        companion = path.with_name(path.name + suffix)
        try:
            if companion.stat().st_mode & 0o077:
                companion.chmod(0o600)
        except (FileNotFoundError, PermissionError):
            pass
