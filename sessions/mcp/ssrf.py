"""Which network addresses a registered server URL may reach.

Checked when a connection opens (the name is resolved then, not when the server was registered)
and again on the address actually connected to, so a DNS answer that changes between the two
checks cannot reach what the first refused.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata endpoints are refused even where private networks are allowed.
METADATA = {
    ipaddress.ip_address("169.254.169.254"),
    ipaddress.ip_address("fd00:ec2::254"),
    ipaddress.ip_address("100.100.100.200"),
}

SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: private in practice


class AddressRefused(Exception):
    def __init__(self, host: str, address: str, reason: str):
        super().__init__(f"{host} resolves to {address}, {reason}; refused")
        self.host, self.address, self.reason = host, address, reason


@dataclass(frozen=True)
class NetworkPolicy:
    """`allow_private` admits loopback and private ranges (on in the embedded mode for local servers)."""

    allow_private: bool = False


def refusal(address: Address, policy: NetworkPolicy) -> str | None:
    """Why this address may not be reached, or None if it may."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return refusal(address.ipv4_mapped, policy)
    if address in METADATA:
        return "a cloud metadata address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    private = "a loopback or private address (not allowed by this portal's settings)"
    # Loopback before reserved (IPv6 ::1 lies in the reserved ::/8); reserved before private
    # (Python counts 240.0.0.0/4 as private).
    if address.is_loopback:
        return None if policy.allow_private else private
    if address.is_reserved:
        return "a reserved address"
    if address.is_private or address in SHARED:
        return None if policy.allow_private else private
    if not address.is_global:
        return "a special-purpose address"
    return None


def check_address(host: str, address: str, policy: NetworkPolicy) -> None:
    reason = refusal(ipaddress.ip_address(address.split("%", 1)[0]), policy)
    if reason:
        raise AddressRefused(host, address, reason)


def check_url(url: str, policy: NetworkPolicy) -> list[str]:
    """Resolve the URL's host and refuse it if any address is forbidden; a DNS failure refuses too."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        raise AddressRefused(url, "-", "no host in the URL")
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise AddressRefused(host, "-", f"cannot be resolved ({exc.strerror})") from exc
    addresses = sorted({info[4][0] for info in infos})
    for address in addresses:
        check_address(host, address, policy)
    return addresses
