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

import anyio

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata endpoints are refused even where private networks are allowed: they hand out the
# host's credentials to whoever asks from inside. Some lie in public or private space, where no other
# rule would catch them. (metadata.google.internal is a name for 169.254.169.254.)
METADATA = {
    ipaddress.ip_address(address): who
    for address, who in [
        ("169.254.169.254", "AWS, Google Cloud, Azure, OpenStack, DigitalOcean, Oracle and others"),
        ("fd00:ec2::254", "AWS instance metadata over IPv6"),
        ("fd20:ce::254", "Google Cloud metadata over IPv6"),
        ("169.254.170.2", "AWS ECS task metadata and credentials"),
        ("100.100.100.200", "Alibaba Cloud"),
        ("168.63.129.16", "Azure WireServer: extensions, health, DNS"),
        ("192.0.0.192", "Oracle Cloud, legacy metadata"),
    ]
}

SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: private in practice

# IPv6 forms that carry an IPv4 address a tunnel or translator may deliver to: each is judged by the
# address it embeds, so "2002:a9fe:a9fe::" cannot reach what "169.254.169.254" may not. (Python's
# ipaddress counts 6to4 as global and NAT64 as reserved, whatever they embed.)
NAT64 = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052 well-known prefix: the IPv4 is the last 32 bits
# RFC 8215 local use: the translator may embed at /48, /56, /64 or /96, so no one reading decides where it leads.
NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # RFC 2765 (SIIT)
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")  # RFC 4291, deprecated; :: and ::1 are not IPv4


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses this IPv6 address would reach through a tunnel or translator."""
    last32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address.sixtofour is not None:  # 2002::/16 (RFC 3056): bits 16-48
        return [address.sixtofour]
    if address.teredo is not None:  # 2001::/32 (RFC 4380): the server, and the client (inverted)
        return list(address.teredo)
    if address in NAT64 or address in IPV4_TRANSLATED:
        return [last32]
    if address in IPV4_COMPATIBLE and int(address) > 1:
        return [last32]
    return []


class AddressRefused(Exception):
    """The portal will not connect there. `kind` is "dns" for a name that does not resolve."""

    def __init__(self, host: str, address: str, reason: str, kind: str = "address_refused"):
        where = f"{host} resolves to {address}, {reason}" if address != "-" else f"{host}: {reason}"
        super().__init__(f"{where}; the portal will not connect to it")
        self.host, self.address, self.reason, self.kind = host, address, reason, kind


@dataclass(frozen=True)
class NetworkPolicy:
    """`allow_private` admits loopback and private ranges (on in the embedded mode for local servers)."""

    allow_private: bool = False


def refusal(address: Address, policy: NetworkPolicy) -> str | None:
    """Why this address may not be reached, or None if it may."""
    if address in METADATA:
        return f"a cloud metadata address ({METADATA[address]})"
    if isinstance(address, ipaddress.IPv6Address):
        if address in NAT64_LOCAL:
            return "a local-use NAT64 address (64:ff9b:1::/48), whose IPv4 address depends on the local translator"
        for inner in embedded_ipv4(address):
            reason = refusal(inner, policy)
            if reason:
                return f"an IPv6 address embedding {inner}, {reason}"
        if address.ipv4_mapped is not None or address in NAT64:
            return None  # nothing but a way to write the IPv4 address, judged above
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


def default_port(scheme: str) -> int:
    return 443 if scheme in ("https", "wss") else 80


async def resolve(host: str, port: int, policy: NetworkPolicy) -> list[str]:
    """Every address `host` resolves to, in the resolver's order, once each has passed the policy.

    Callers connect to these addresses themselves (never to the name again), so a second,
    different DNS answer cannot reach what this check refused.
    """
    try:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise AddressRefused(host, "-", f"cannot be resolved ({reason})", kind="dns") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise AddressRefused(host, "-", "cannot be resolved (no address)", kind="dns")
    for address in addresses:
        check_address(host, address, policy)
    return addresses


def check_url(url: str, policy: NetworkPolicy) -> list[str]:
    """Resolve the URL's host and refuse it if any address is forbidden; a DNS failure refuses too."""
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        raise AddressRefused(url, "-", "no host in the URL")
    port = parts.port or default_port(parts.scheme)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise AddressRefused(host, "-", f"cannot be resolved ({exc.strerror})", kind="dns") from exc
    addresses = sorted({info[4][0] for info in infos})
    for address in addresses:
        check_address(host, address, policy)
    return addresses


# Loopback and private addresses allowed: for local development and tests of local servers.
LOCAL_NETWORK = NetworkPolicy(allow_private=True)
