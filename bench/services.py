"""PostgreSQL and Redis servers of the run's own, on free ports, that a fault test or the soak
may restart at will without touching the machine's shared ones (other work uses those)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.stack import free_port, stop, wait_for_port


def find_postgres_bin() -> Path:
    """The installed PostgreSQL's programs: $PG_BIN, else the newest Debian version that has an
    initdb, else pg_config's answer (a path that lacks initdb makes available() say so)."""
    if os.environ.get("PG_BIN"):
        return Path(os.environ["PG_BIN"])
    versions = [path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")]
    versions.sort(key=lambda path: [int(part) for part in path.parent.name.split(".") if part.isdigit()])
    if versions:
        return versions[-1]
    try:
        found = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return Path("/usr/lib/postgresql")
    return Path(found.stdout.strip())


PG_BIN = find_postgres_bin()


def available() -> str:
    """Why private services cannot run here, or "" if they can."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed"
    if not (PG_BIN / "initdb").exists():
        return f"PostgreSQL's initdb is not in {PG_BIN}"
    return ""


class PrivateRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> PrivateRedis:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, self.process)
        return self

    def stop(self) -> None:
        if self.process is not None:
            stop(self.process)
            self.process = None

    def restart(self) -> None:
        """Down and up again, empty: it keeps nothing on disk, as the machine's Redis."""
        self.stop()
        self.start()
        self.restarts += 1


class PrivatePostgres:
    """A cluster in a temporary folder, owned by the postgres user when run as root (initdb refuses root)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="portal-pg-"))
        self.data = self.dir / "data"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}"
        self.restarts = 0
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.dir, "postgres", "postgres")

    def _run(self, *argv: str) -> None:
        subprocess.run([*self._as, *argv], check=True, capture_output=True, timeout=120)

    def start(self) -> PrivatePostgres:
        if not self.data.exists():
            self._run(str(PG_BIN / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.dir / "log"), "-w", "start"
        )
        return self

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        """A fast shutdown (every session cut) and a start, as an operator's restart does."""
        self.stop()
        self.start()
        self.restarts += 1

    def create_database(self, name: str) -> str:
        import psycopg

        for _ in range(50):
            try:
                with psycopg.connect(f"{self.url}/postgres", autocommit=True) as conn:
                    conn.execute(f'CREATE DATABASE "{name}"')
                return f"{self.url}/{name}"
            except psycopg.OperationalError:
                time.sleep(0.1)
        raise RuntimeError("the private PostgreSQL did not accept connections")

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
