"""Serve the portal with Daphne; in the embedded mode, with its Celery worker threads in-process."""

from __future__ import annotations

import os
import signal
import socket
import sys

from django.conf import settings
from django.core.management.base import BaseCommand

from portal.apps_origin import serve_apps_at
from portal.site import serve_at, served_at


class Command(BaseCommand):
    help = (
        "Serve HTTP and WebSockets on one port, the MCP Apps sandbox on the next (and, in the embedded mode, "
        "run the worker threads too)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--apps-port",
            type=int,
            default=None,
            help="Where the MCP Apps sandbox is served (PORTAL_APPS_ORIGIN): the port after --port by default, 0 for none.",
        )
        parser.add_argument("--no-worker", action="store_true", help="Do not start the embedded worker threads.")

    def handle(self, *args, host: str, port: int, apps_port: int | None, no_worker: bool, **options) -> None:
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        # After the settings: loading the ASGI app loads the URLconf and the apps.
        from portal.asgi import application

        # Before the worker starts: its OAuth flows register the redirect URI made from SITE_URL.
        serve_at(host, port)
        apps_port = self._apps_port(host, port, apps_port)
        worker = None
        if settings.EMBEDDED and not no_worker:
            # Only the embedded mode loads the worker into this process.
            from portal.embedded import start_worker

            worker = start_worker()
        mode = "embedded: SQLite, in-memory broker and channel layer" if settings.EMBEDDED else "distributed"
        self.stdout.write(f"MCP Portal ({mode}) ready at http://{host}:{port}/", ending="\n")
        self.stdout.write(f"OAuth redirect URI: {settings.PORTAL_OAUTH_REDIRECT_URI} (SITE_URL {settings.SITE_URL})")
        if apps_port:
            self.stdout.write(
                f"MCP Apps sandbox on port {apps_port} (PORTAL_APPS_ORIGIN {settings.PORTAL_APPS_ORIGIN})"
            )
        self.stdout.flush()
        endpoints = build_endpoint_description_strings(host=host, port=port)
        if apps_port:
            endpoints += build_endpoint_description_strings(host=host, port=apps_port)
        try:
            # Ctrl+C and SIGTERM stop Daphne's reactor, which returns here.
            Server(
                application=application,
                endpoints=endpoints,
                verbosity=0,
            ).run()
        finally:
            if worker is not None:
                self._stop(worker)

    def _apps_port(self, host: str, port: int, asked: int | None) -> int:
        """The port the apps origin is served on (0: none), and PORTAL_APPS_ORIGIN made its address unless
        the environment set one (a proxy in front of the portal forwards that origin to this port)."""
        chosen = port + 1 if asked is None else asked
        if asked is None and not _free(host, chosen):
            # The default must not stop `make run`: say so, and serve no apps.
            self.stdout.write(f"MCP Apps are off: port {chosen} is in use (choose another with --apps-port).")
            chosen = 0
        if chosen:
            serve_apps_at(chosen)
            if not os.environ.get("PORTAL_APPS_ORIGIN"):
                os.environ["PORTAL_APPS_ORIGIN"] = settings.PORTAL_APPS_ORIGIN = served_at(host, chosen)
        return chosen

    def _stop(self, worker) -> None:
        """End what is in flight (interrupted), then the worker: a few seconds at most (docs/deployment.md)."""
        # Loaded with the worker (see above).
        from portal.embedded import stop_worker

        def at_once(signum, _frame) -> None:
            # A second Ctrl+C while stopping: the person will not wait; the sandbox ends the servers.
            sys.stderr.write("Stopped without waiting for the worker.\n")
            os._exit(128 + signum)

        signal.signal(signal.SIGINT, at_once)
        signal.signal(signal.SIGTERM, at_once)
        self.stdout.write("Stopping: calls in flight end as interrupted.", ending="\n")
        self.stdout.flush()
        stop_worker(worker)


def _free(host: str, port: int) -> bool:
    try:
        with socket.create_server((host or "127.0.0.1", port)):
            return True
    except OSError:
        return False
