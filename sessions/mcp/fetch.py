"""One small JSON document from a URL someone else chose, behind the SSRF policy.

Used for OAuth client ID metadata documents (a client names an https URL as its client_id and the
portal reads it while a person is signing in): the name is resolved here, every address checked, the
connection made to a checked address only, no redirect followed, no proxy from the environment, and
the body read no further than its limit within one deadline.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import httpcore
import httpx

from .ssrf import AddressRefused, NetworkPolicy, check_address


class FetchRefused(Exception):
    """The document could not be read, or is not a JSON object; the text is for the operator's log."""


class CheckedNetwork(httpcore.NetworkBackend):
    """httpcore's synchronous network backend with the SSRF policy in front (the synchronous twin of
    sessions/mcp/transports.py's)."""

    def __init__(self, policy: NetworkPolicy):
        self.policy = policy
        self.inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise AddressRefused(host, "-", f"cannot be resolved ({exc})", kind="dns") from exc
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
        for address in addresses:
            check_address(host, address, self.policy)
        error: Exception | None = None
        for address in addresses:
            try:
                return self.inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                error = exc
        raise error or AddressRefused(host, "-", "cannot be resolved (no address)", kind="dns")

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options: Any = None) -> Any:
        raise AddressRefused(path, "-", "a Unix socket")


def fetch_json(
    url: str, policy: NetworkPolicy, timeout: float, max_bytes: int, verify: Any = True
) -> tuple[dict[str, Any], httpx.Headers]:
    """The JSON object at `url` (https only) and the response's headers; FetchRefused otherwise."""
    if not url.startswith("https://"):
        raise FetchRefused("only https URLs are fetched")
    transport = httpx.HTTPTransport(verify=verify, trust_env=False)
    transport._pool._network_backend = CheckedNetwork(policy)  # type: ignore[attr-defined]  # httpx takes none itself
    deadline = time.monotonic() + timeout
    try:
        with httpx.Client(transport=transport, timeout=timeout, follow_redirects=False, trust_env=False) as client:
            with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
                if response.status_code != 200:
                    raise FetchRefused(f"HTTP {response.status_code}")
                media = response.headers.get("content-type", "").split(";")[0].strip().lower()
                if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
                    raise FetchRefused(f"not JSON ({media!r})")
                body = b""
                for chunk in response.iter_bytes():
                    body += chunk
                    if len(body) > max_bytes:
                        raise FetchRefused(f"longer than {max_bytes} bytes")
                    if time.monotonic() > deadline:
                        raise FetchRefused(f"not read within {timeout} s")
                headers = response.headers
    except (httpx.HTTPError, AddressRefused) as exc:
        raise FetchRefused(str(exc)) from exc
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise FetchRefused("not valid JSON") from exc
    if not isinstance(data, dict):
        raise FetchRefused("not a JSON object")
    return data, headers
