"""The bubblewrap sandbox every stdio server runs in: a policy (plain data) and the bwrap argv it makes.

What the server sees (docs/security.md, stdio servers):
- its own PID, IPC and UTS namespaces (it sees only its own processes; /proc is its own), and
  its own network namespace, with nothing but a loopback of its own, when the server's network
  is off; with it on, the host's network (its loopback services included);
- no capabilities, and the sandbox dies with the worker that started it (--die-with-parent);
- a root of its own: the system read-only (/usr and the /bin, /lib links, a few files of /etc),
  a private /dev, an empty writable /tmp and home (tmpfs, gone when it stops), and only the paths
  the operator binds (PORTAL_STDIO_BIND_PATHS: read-only unless marked writable). The portal's
  directory and PORTAL_VAR_DIR are not in it; `hidden` paths are masked even under a bind.
- no --new-session: it would put the server in a process group of its own, out of reach of the
  stop escalation (processes.py), which signals the group bwrap leads. The terminal it guards
  against (TIOCSTI) is not there: the worker starts bwrap in a session of its own, with no tty.
- the escalation's SIGINT and SIGTERM reach the server, not bwrap: bwrap is started ignoring
  them (`env --ignore-signal`) and the server with them reset (`env --default-signal`). Were bwrap
  to die of the SIGINT, --die-with-parent would SIGKILL the server at once, before it could stop
  on its own; as it is, bwrap ends when the server does, and SIGKILL still ends everything.
The environment is the one the worker gives the bwrap process, not argv: values on a command line
are readable by every user of the host (ps), environment values are not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .processes import group_alive, reap_orphans

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs need of /etc (names, certificates, the resolver, the loader's cache), and no
# more: /etc also holds the host's secrets (shadow, ssh host keys, the portal's own config).
ETC_PATHS = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/ssl",
    "/etc/pki",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/mime.types",
    "/etc/os-release",
    "/etc/protocols",
    "/etc/services",
)
HOME = "/home/mcp"
ENV = "/usr/bin/env"
STOP_SIGNALS = "INT,TERM"
HOSTNAME = "mcp-sandbox"
PROBE_SECONDS = 10.0
PROBE_RETRY_SECONDS = 30.0


class SandboxUnavailable(Exception):
    """bubblewrap is missing or does not work here: no stdio server starts until it does."""


class NotInSandbox(Exception):
    """The command or working directory is not among the paths the sandbox shows."""

    def __init__(self, what: str, path: str):
        super().__init__(
            f"the {what} {path} is not inside the stdio sandbox: an operator binds the paths stdio servers "
            "need with PORTAL_STDIO_BIND_PATHS"
        )
        self.path = path


@dataclass(frozen=True)
class Bind:
    """A host path shown at the same place inside the sandbox; read-only unless `writable`."""

    path: str
    writable: bool = False

    @classmethod
    def parse(cls, text: str) -> Bind:
        """`/srv/data` (read-only), `/srv/data:ro` or `/srv/data:rw`."""
        path, mode = text.strip(), ""
        if path.endswith((":ro", ":rw")):
            path, mode = path[:-3], path[-2:]
        if not os.path.isabs(path):
            raise ValueError(f"{text!r}: a bind path must be absolute")
        return cls(os.path.normpath(path), writable=mode == "rw")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True)
class SandboxPolicy:
    bwrap: str = "bwrap"
    network: bool = True
    binds: tuple[Bind, ...] = ()
    # Masked wherever a bind would show them (PORTAL_VAR_DIR, the keys): a directory by an empty
    # tmpfs, a file by /dev/null.
    hidden: tuple[str, ...] = ()
    system: tuple[str, ...] = SYSTEM_PATHS
    etc: tuple[str, ...] = ETC_PATHS
    home: str = HOME

    def shows(self, path: str) -> bool:
        """Whether `path` exists inside the sandbox (as itself, under a mount, or as a mount's parent)."""
        path = os.path.normpath(path)
        if any(_within(path, hidden) for hidden in self.hidden):
            return False
        mounts = [*self.system, *self.etc, "/tmp", "/proc", "/dev", self.home, *(bind.path for bind in self.binds)]
        return any(_within(path, mount) or _within(mount, path) for mount in mounts)

    def argv(
        self,
        command: Sequence[str],
        cwd: str | None = None,
        is_dir: Callable[[str], bool] = os.path.isdir,
        exists: Callable[[str], bool] = os.path.lexists,
    ) -> list[str]:
        """bwrap's command line that starts `command` (an absolute executable and its arguments) inside."""
        argv = [
            ENV,
            f"--ignore-signal={STOP_SIGNALS}",
            self.bwrap,
            "--die-with-parent",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
            *([] if self.network else ["--unshare-net"]),
            "--hostname",
            HOSTNAME,
            "--cap-drop",
            "ALL",
        ]
        for path in (*self.system, *self.etc):
            argv += ["--ro-bind-try", path, path]
        argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", self.home]
        for bind in self.binds:
            argv += ["--bind-try" if bind.writable else "--ro-bind-try", bind.path, bind.path]
        for hidden in self.hidden:
            under_a_bind = any(_within(hidden, bind.path) for bind in self.binds)
            if under_a_bind and exists(hidden):
                argv += ["--tmpfs", hidden] if is_dir(hidden) else ["--ro-bind", "/dev/null", hidden]
        argv += ["--chdir", cwd or self.home, "--", ENV, f"--default-signal={STOP_SIGNALS}", *command]
        return argv

    def environment(self, base: dict[str, str], env: dict[str, str]) -> dict[str, str]:
        """The server's whole environment: the basics (`base`), home inside, then its own env."""
        return {**base, "HOME": self.home, **env}


# -- is bubblewrap usable here? ---------------------------------------------------------------

_probed: dict[tuple[str, bool], tuple[str, float]] = {}


def find_bwrap(policy: SandboxPolicy) -> str:
    found = shutil.which(policy.bwrap)
    if found is None:
        raise SandboxUnavailable(
            f"bubblewrap ({policy.bwrap}) was not found: install it (apt-get install bubblewrap, "
            "`make run` does) or point PORTAL_STDIO_BWRAP at it"
        )
    return found


def _try(argv: list[str]) -> str:
    """Why `argv` failed, or "" if it ran and exited 0; its process group is gone and reaped after."""
    try:
        process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={}, text=True, start_new_session=True
        )
    except OSError as exc:
        return str(exc)
    try:
        _, stderr = process.communicate(timeout=PROBE_SECONDS)
        reason = "" if process.returncode == 0 else (stderr.strip() or f"exit status {process.returncode}")
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        reason = f"it did not finish within {PROBE_SECONDS:.0f} s"
    # bwrap's PID-namespace init can outlive bwrap by a moment; the worker is a subreaper, so
    # it becomes ours to reap (processes.py), or it would stay a zombie.
    deadline = time.monotonic() + 1.0
    while group_alive(process.pid, True) and time.monotonic() < deadline:
        time.sleep(0.01)
    reap_orphans(process.pid, process.pid)
    return reason


def probe(policy: SandboxPolicy) -> None:
    """Start /bin/true in the policy's sandbox once; raise SandboxUnavailable saying why it cannot.

    A success is remembered for the life of the process; a failure for PROBE_RETRY_SECONDS, so an
    operator who installs bubblewrap does not have to restart the worker.
    """
    bwrap = find_bwrap(policy)
    key = (bwrap, policy.network)
    remembered = _probed.get(key)
    if remembered is not None and (not remembered[0] or time.monotonic() - remembered[1] < PROBE_RETRY_SECONDS):
        if remembered[0]:
            raise SandboxUnavailable(remembered[0])
        return
    trial = SandboxPolicy(bwrap=bwrap, network=policy.network, system=policy.system, etc=policy.etc)
    reason = _try(trial.argv(["/bin/true"]))
    if reason:
        reason = (
            f"bubblewrap ({bwrap}) cannot make a sandbox here: {reason[-300:]}. It needs user namespaces "
            "(or to run as root); see docs/deployment.md"
        )
    _probed[key] = (reason, time.monotonic())
    if reason:
        raise SandboxUnavailable(reason)
