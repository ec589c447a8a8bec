"""Whether a URL's host may be reached: the check that keeps outbound requests from
reaching inside the network (SSRF), shared by ``download_file`` and webhooks.

Every address a host resolves to must be globally routable: loopback, private,
link-local, shared (CGN 100.64/10), reserved, unspecified and multicast addresses
are refused, IPv4 inside IPv6 (mapped, 6to4, Teredo, NAT64) is judged as the IPv4 it
carries, and cloud metadata addresses are refused even when an allow list names
them. An ``AllowList`` (a setting) names hosts or networks that may be reached
although they are not public, and on which ports (80 and 443 unless it says).
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable

__all__ = [
    "DEFAULT_PORTS",
    "METADATA_ADDRESSES",
    "AllowList",
    "IPAddress",
    "address_refusal",
    "host_refusal",
    "resolve_host",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack...
        "fd00:ec2::254",  # AWS over IPv6
        "169.254.170.2",  # AWS ECS task metadata
        "100.100.100.200",  # Alibaba Cloud
    )
)
"""Cloud metadata services: refused even when the allow list names them."""

_SHARED = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def address_refusal(address: IPAddress) -> str | None:
    """Why connecting to ``address`` is refused, or None for a public address."""
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if isinstance(address, ipaddress.IPv6Address):
        carried: list[ipaddress.IPv4Address | None] = [address.ipv4_mapped, address.sixtofour]
        if address.teredo is not None:
            carried.extend(address.teredo)
        if address in _NAT64:
            # Judged as the IPv4 it translates to (an IPv6-only network reaches the
            # IPv4 internet so); Python counts the whole prefix as reserved.
            inner = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
            reason = address_refusal(inner)
            return None if reason is None else f"{reason} (carried in {address})"
        for carrier in carried:
            if carrier is not None and (reason := address_refusal(carrier)) is not None:
                return f"{reason} (carried in {address})"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv4Address) and address in _SHARED:
        return "a shared (carrier-grade NAT) address"
    if address.is_private:
        return "a private address"
    if address.is_unspecified or address.is_reserved:
        return "a reserved address"
    if not address.is_global:
        return "not a globally routable address"
    return None


DEFAULT_PORTS = frozenset({80, 443})
"""What an allow-list entry without a port opens: the web's own ports, nothing else."""

_Ports = frozenset[int] | None  # None: every port


class AllowList:
    """Hosts, addresses and networks that may be reached though not public, each on the
    ports its entry names: ``host`` (80 and 443), ``host:port``, ``host:*`` (every port);
    an IPv6 address or network with a port goes in brackets, ``[fd00::1]:8080``. A bad
    entry is a ValueError naming it."""

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.names: dict[str, _Ports] = {}
        self.networks: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, _Ports]] = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            host, ports = _split(raw, entry)
            try:
                self.networks.append((ipaddress.ip_network(host, strict=False), ports))
            except ValueError:
                if not host or "/" in host or any(c.isspace() for c in host):
                    raise ValueError(f"allow-list entry {raw!r} is not a host or network") from None
                known = self.names.get(host, frozenset())
                self.names[host] = None if known is None or ports is None else known | ports

    def __repr__(self) -> str:
        names = sorted(self.names)
        return f"AllowList(names={names}, networks={[str(n) for n, _ in self.networks]})"

    def allows(self, host: str, address: IPAddress, port: int | None) -> bool:
        """Whether ``host``, resolved to ``address``, is on the list for ``port`` (None:
        for any port at all)."""
        name = host.lower().rstrip(".")
        if name in self.names and _opens(self.names[name], port):
            return True
        return any(address in net and _opens(ports, port) for net, ports in self.networks)


def _opens(ports: _Ports, port: int | None) -> bool:
    return ports is None or port is None or port in ports


def _split(raw: str, entry: str) -> tuple[str, _Ports]:
    """An entry's host (or network) and the ports it opens."""
    port: str | None = None
    if entry.startswith("["):
        host, close, rest = entry[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise ValueError(f"allow-list entry {raw!r}: write an IPv6 port as [address]:port")
        port = rest[1:] if rest else None
    elif entry.count(":") == 1:
        host, _, port = entry.partition(":")
    else:
        host = entry  # a name, an IPv4 address or network, or a bare IPv6 one
    host = host.rstrip(".")
    if port is None:
        return host, DEFAULT_PORTS
    if port == "*":
        return host, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"allow-list entry {raw!r}: the port must be 1-65535 or *")
    return host, frozenset({int(port)})


def host_refusal(host: str, address: IPAddress, allow: AllowList, port: int) -> str | None:
    """Why ``host``, resolved to ``address``, may not be reached on ``port``, or None: the
    allow list lifts every refusal but a cloud metadata address's."""
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if allow.allows(host, address, port):
        return None
    reason = address_refusal(address)
    if reason is not None and allow.allows(host, address, port=None):
        reason += f" (the allow list opens it on other ports, not {port}: add host:{port})"
    return reason


async def resolve_host(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (an IP literal resolves to itself), in order.
    Raises ``socket.gaierror`` when it does not resolve."""
    try:
        return [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]))
        if address not in found:
            found.append(address)
    return found
