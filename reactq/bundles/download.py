"""``download_file``: fetch a URL into the workspace without reaching inside the network.

A worker usually sits next to things a model must not reach: the cloud's
metadata service, databases, admin consoles. So, for every hop (redirects are
followed by hand, each one checked again):

- only ``http`` and ``https``, and no credentials in the URL;
- the host is resolved once, and every address it resolves to must be (``reactq.shared.netcheck``)
  globally routable: loopback, private, link-local, shared (CGN 100.64/10),
  reserved, unspecified and multicast addresses are refused, IPv4 inside IPv6
  (mapped, 6to4, Teredo, NAT64) is judged as the IPv4 it carries, and cloud
  metadata addresses are refused even when allowed;
- the connection goes to an address that was checked: the request is sent to
  the IP itself, with the name in ``Host`` and in TLS (SNI and certificate
  check), so a second DNS answer (rebinding) cannot send it elsewhere.

``REACTQ_DOWNLOAD_ALLOW_HOSTS`` names hosts, addresses or networks that may be
reached although they are not public (an internal mirror; a test server), on
ports 80 and 443 unless an entry names its port (``host:8080``, ``host:*``).

Time is capped twice too: each network step (connect, each read) by
``DownloadPolicy.timeout``, the whole download (redirects and body) by
``REACTQ_DOWNLOAD_DEADLINE_SECONDS``, so a server that trickles a byte a second
cannot hold the tool.

The size is capped twice: a ``Content-Length`` over the limit is refused before
the body is read, and the bytes are counted while they stream (a body without
a length, or longer than it said, is cut off). The file is staged in the
workspace and lands by an atomic rename that never replaces an existing file;
a failed or cut download leaves nothing behind. No content decoding is asked
for or done, so a small compressed body cannot inflate past the cap.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import unquote

import httpx2

from reactq.bundles.journal import Journal
from reactq.bundles.workspace import (
    FileChange,
    StagedFile,
    WorkspaceError,
    Workspaces,
    show,
    split_path,
)
from reactq.shared.errors import ToolError
from reactq.shared.netcheck import (
    METADATA_ADDRESSES,
    AllowList,
    IPAddress,
    address_refusal,
    host_refusal,
    resolve_host,
)
from reactq.worker.agent.tools import Tool, ToolContext

__all__ = [
    "METADATA_ADDRESSES",
    "AllowList",
    "DownloadError",
    "DownloadPolicy",
    "Fetched",
    "address_refusal",
    "download_tools",
    "fetch",
    "resolve",
]

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_CHUNK = 256 * 1024


class DownloadError(ToolError):
    """``download_file`` refused a URL or the download failed; nothing was written."""

    code = "download_error"


@dataclass(frozen=True)
class DownloadPolicy:
    """What ``download_file`` may fetch."""

    max_bytes: int
    """Largest download (the workspace's quota may leave less)."""
    allow: AllowList
    """Non-public hosts it may reach anyway."""
    max_redirects: int = 5
    timeout: float = 30.0
    """Seconds any one network step (connect, read) may take."""
    deadline: float = 120.0
    """Seconds the whole download may take, every redirect and byte included (a server
    trickling its body a byte at a time meets every ``timeout`` but not this)."""
    user_agent: str = "reactq-download/1"
    verify: ssl.SSLContext | None = None
    """The certificate check's trust: None for the system's; a context for a private CA."""


@dataclass(frozen=True)
class Fetched:
    """A finished download."""

    url: str
    """The last hop's URL."""
    size: int
    content_type: str | None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to (an IP literal resolves to itself), in order."""
    try:
        return await resolve_host(host, port)
    except socket.gaierror as exc:
        raise DownloadError(f"cannot resolve {host}: {exc.strerror}") from None


def _parse(url: str) -> httpx2.URL:
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise DownloadError(f"not a valid URL: {url!r} ({exc})") from None
    if parsed.scheme not in ("http", "https"):
        raise DownloadError(f"only http and https URLs are downloaded, not {parsed.scheme!r}")
    if not parsed.host:
        raise DownloadError(f"the URL {url!r} names no host")
    if parsed.userinfo:
        raise DownloadError("URLs with credentials (user:password@) are not downloaded")
    return parsed.copy_with(fragment=None)


async def _connect(
    client: httpx2.AsyncClient, url: httpx2.URL, policy: DownloadPolicy, resolver: Resolver
) -> httpx2.Response:
    """Send the GET for one hop to a checked address of its host; the streaming response."""
    host = url.raw_host.decode("ascii")
    port = url.port or (443 if url.scheme == "https" else 80)
    addresses = await resolver(host, port)
    if not addresses:
        raise DownloadError(f"{url.host} resolves to no address")
    for address in addresses:
        # Every address: the connection may go to any of them.
        if (reason := host_refusal(host, address, policy.allow, port)) is not None:
            raise DownloadError(f"refused {url}: {url.host} resolves to {address}, {reason}")
    literal = _is_ip(host)
    headers = {
        "Host": url.netloc.decode("ascii"),
        "User-Agent": policy.user_agent,
        "Accept": "*/*",
        # The bytes as sent: nothing decompressed, so nothing inflates past the cap.
        "Accept-Encoding": "identity",
    }
    last: Exception | None = None
    for address in addresses:
        # The checked address itself, not the name: no second lookup can move the request.
        target = url.copy_with(host=str(address))
        extensions = {"sni_hostname": host} if url.scheme == "https" and not literal else {}
        client.cookies.clear()  # a cookie set for one host must not follow to another
        request = client.build_request("GET", target, headers=headers, extensions=extensions)
        try:
            return await client.send(request, stream=True)
        except (httpx2.ConnectError, httpx2.ConnectTimeout) as exc:
            last = exc
    raise DownloadError(f"could not connect to {url.host}: {last}")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


async def fetch(
    url: str,
    sink: StagedFile,
    *,
    limit: int,
    policy: DownloadPolicy,
    resolver: Resolver = resolve,
    limit_reason: str = "",
) -> Fetched:
    """Download ``url`` into ``sink``, following redirects by hand; at most ``limit`` bytes,
    within ``policy.deadline`` seconds in all."""
    try:
        async with asyncio.timeout(policy.deadline):
            return await _fetch(url, sink, limit, policy, resolver, limit_reason)
    except TimeoutError:
        raise DownloadError(
            f"the download took over {policy.deadline:g} s in all and was stopped "
            "(REACTQ_DOWNLOAD_DEADLINE_SECONDS); nothing was saved"
        ) from None


async def _fetch(
    url: str,
    sink: StagedFile,
    limit: int,
    policy: DownloadPolicy,
    resolver: Resolver,
    limit_reason: str,
) -> Fetched:
    current = _parse(url)
    async with httpx2.AsyncClient(
        follow_redirects=False,
        trust_env=False,  # no proxy from the environment: the connection must go where checked
        timeout=policy.timeout,
        verify=policy.verify if policy.verify is not None else True,
    ) as client:
        for _ in range(policy.max_redirects + 1):
            try:
                response = await _connect(client, current, policy, resolver)
            except httpx2.HTTPError as exc:
                raise DownloadError(f"{current}: {type(exc).__name__}: {exc}") from None
            try:
                status = response.status_code
                if status in _REDIRECTS:
                    location = response.headers.get("location")
                    if not location:
                        raise DownloadError(f"{current} redirected (HTTP {status}) to nowhere")
                    try:
                        following = current.join(location)
                    except (httpx2.InvalidURL, ValueError) as exc:
                        raise DownloadError(f"{current} redirected to a bad URL: {exc}") from None
                    current = _parse(str(following))
                    continue
                if not 200 <= status < 300:
                    raise DownloadError(f"{current} answered HTTP {status}")
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise DownloadError(
                        f"{current} is {declared} bytes, over the {limit}-byte limit{limit_reason}"
                    )
                size = await _stream(response, sink, limit, limit_reason)
                return Fetched(str(current), size, response.headers.get("content-type"))
            except httpx2.HTTPError as exc:
                raise DownloadError(f"{current}: {type(exc).__name__}: {exc}") from None
            finally:
                await response.aclose()
    raise DownloadError(f"more than {policy.max_redirects} redirects; the last was to {current}")


async def _stream(response: httpx2.Response, sink: StagedFile, limit: int, reason: str) -> int:
    total = 0
    pending = bytearray()
    async for chunk in response.aiter_raw():
        total += len(chunk)
        if total > limit:
            # Whatever the header said: the count is what holds.
            raise DownloadError(
                f"the download passed the {limit}-byte limit{reason} and was cut off"
            )
        pending += chunk
        if len(pending) >= _CHUNK:
            await asyncio.to_thread(sink.write, bytes(pending))
            pending.clear()
    if pending:
        await asyncio.to_thread(sink.write, bytes(pending))
    return total


def _file_name(url: str) -> str:
    """A safe file name from a URL's last path segment."""
    segment = unquote(httpx2.URL(url).path.rsplit("/", 1)[-1])
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", segment).lstrip(".")[:100]
    return name or "download"


def download_tools(
    workspaces: Workspaces,
    policy: DownloadPolicy,
    *,
    timeout: float | None = 300.0,
    resolver: Resolver = resolve,
    journal: Journal | None = None,
) -> list[Tool]:
    """``download_file`` over ``workspaces`` (``resolver`` replaceable for tests;
    ``journal`` records each download for undo and its ``file_change`` event)."""
    journal = journal or Journal()

    async def download_file(ctx: ToolContext, url: str, path: str | None = None) -> str:
        """Download an http(s) URL into the workspace (by default into downloads/).

        Args:
            url: The http or https URL.
            path: Where to save it, relative to the workspace; a path ending in / is a folder.
        """
        ws = workspaces.for_session(ctx.session_id)
        folder = "downloads"
        target: str | None = None
        if path is not None:
            parts = split_path(path)
            if path.endswith("/") or not parts:
                folder = show(parts)
            else:
                target = show(parts)
                if await asyncio.to_thread(ws.kind, target) is not None:
                    raise DownloadError(f"{target} exists already: choose another path")
        free = await asyncio.to_thread(ws.free_bytes)
        limit = min(policy.max_bytes, free)
        reason = " (what the workspace quota leaves)" if free < policy.max_bytes else ""
        staged = await asyncio.to_thread(ws.stage)
        try:
            fetched = await fetch(
                url, staged, limit=limit, policy=policy, resolver=resolver, limit_reason=reason
            )
            if target is None:
                name = _file_name(fetched.url)
                target = name if folder == "." else f"{folder}/{name}"
            saved = target

            def save() -> tuple[str, list[FileChange]]:
                changes = [FileChange(saved, None, staged)]
                try:
                    ws.commit(changes)
                except WorkspaceError as exc:
                    raise DownloadError(f"not saved: {exc.message}; pass another path") from None
                return saved, changes

            await journal.apply(ctx, save)
        finally:
            staged.discard()  # a no-op once committed; a partial file goes here
        kind = f" ({fetched.content_type})" if fetched.content_type else ""
        return f"Downloaded {fetched.size} bytes from {fetched.url} to {target}{kind}."

    return [Tool(download_file, name="download_file", timeout=timeout, writes=True)]
