"""The attack: another local user reads the portal's database or its keys from PORTAL_VAR_DIR. Every
file there has no group or other bits, and nor has the directory, whatever the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

# While the connection is open the WAL and shared-memory files exist (the last close removes the WAL).
WRITE_AND_LIST = """
import os, stat
from django.conf import settings
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE IF NOT EXISTS attack_probe (x)")
    cursor.execute("INSERT INTO attack_probe VALUES (1)")
    for name in sorted(os.listdir(settings.VAR_DIR)):
        print("mode", name, oct(stat.S_IMODE(os.stat(os.path.join(settings.VAR_DIR, name)).st_mode)))
"""


def manage(var: Path, *args: str) -> str:
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DATABASE_URL", "REDIS_URL", "PORTAL_", "DJANGO_SECRET_KEY"))
    }
    env["PORTAL_VAR_DIR"] = str(var)
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.umask(0o002),  # a lax umask: the modes must not depend on it
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def modes(listing: str) -> dict[str, int]:
    rows = [line.split() for line in listing.splitlines() if line.startswith("mode ")]
    return {name: int(mode, 8) for _, name, mode in rows}


def test_another_local_user_cannot_read_the_database_or_the_keys(tmp_path):
    var = tmp_path / "var"
    manage(var, "migrate", "--noinput")
    manage(var, "bootstrap")
    seen = modes(manage(var, "shell", "-c", WRITE_AND_LIST))

    assert {"portal.sqlite3", "portal.sqlite3-wal", "portal.sqlite3-shm", "secret_key", "encryption_keys"} <= set(seen)
    assert {name: mode for name, mode in seen.items() if mode & 0o077} == {}, seen
    assert stat.S_IMODE(var.stat().st_mode) == 0o700


def test_a_var_dir_left_readable_by_an_earlier_version_is_tightened(tmp_path):
    var = tmp_path / "var"
    manage(var, "migrate", "--noinput")
    # What an earlier version left: a database and a directory anyone on the machine could read.
    var.chmod(0o755)
    (var / "portal.sqlite3").chmod(0o644)
    (var / "portal.sqlite3-shm").touch(0o644)
    seen = modes(manage(var, "shell", "-c", WRITE_AND_LIST))
    assert {name: mode for name, mode in seen.items() if mode & 0o077} == {}, seen
    assert stat.S_IMODE(var.stat().st_mode) == 0o700
