"""Whether a URL's host may be reached: the check that keeps outbound requests from
reaching inside the network (SSRF), shared by ``download_file`` and webhooks.

Every address a host resolves to must be globally routable: loopback, private,
link-local, shared (CGN 100.64/10), reserved, unspecified and multicast addresses
are refused, IPv4 inside IPv6 (mapped, 6to4, Teredo, NAT64) is judged as the IPv4 it
carries, and cloud metadata addresses are refused even when an allow list names
them. An ``AllowList`` (a setting) names hosts or networks that may be reached
although they are not public.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Iterable

__all__ = [
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


class AllowList:
    """Hosts, addresses and networks that may be reached though not public."""

    def __init__(self, entries: Iterable[str] = ()) -> None:
        self.names: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for raw in entries:
            entry = raw.strip().lower().rstrip(".")
            if not entry:
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                self.names.add(entry)

    def __repr__(self) -> str:
        return f"AllowList(names={sorted(self.names)}, networks={[str(n) for n in self.networks]})"

    def allows(self, host: str, address: IPAddress) -> bool:
        """Whether ``host``, resolved to ``address``, is on the list."""
        if host.lower().rstrip(".") in self.names:
            return True
        return any(address in network for network in self.networks)


def host_refusal(host: str, address: IPAddress, allow: AllowList) -> str | None:
    """Why ``host``, resolved to ``address``, may not be reached, or None: the allow list
    lifts every refusal but a cloud metadata address's."""
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    return None if allow.allows(host, address) else address_refusal(address)


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
