"""``download_file``: only public addresses (checked at every hop, connected to as
checked), the size capped by the header and by the count, atomic and never replacing.

A small HTTP server on 127.0.0.1 plays every part. By default it is refused (a
loopback address); ``REACTQ_DOWNLOAD_ALLOW_HOSTS=127.0.0.1:*`` lets the positive
paths reach it, and a redirect from it to a private address is refused mid-chain.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import shutil
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from reactq.bundles import file_tools
from reactq.bundles.download import (
    AllowList,
    DownloadPolicy,
    address_refusal,
    download_tools,
)
from reactq.bundles.workspace import Workspaces
from reactq.shared.errors import ConfigError, ToolError
from reactq.shared.settings import Settings
from reactq.shared.webhooks import WebhookRefusedError, check_url
from reactq.worker.agent.tools import Tool, ToolContext

CTX = ToolContext(session_id="dl-1", turn_id="t_1")
LIMIT = 1000


@dataclass
class Server:
    port: int = 0
    requests: list[tuple[str, str]] = field(default_factory=list)
    """(path, Host header) of every request."""

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} X"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join([*lines, "Connection: close", "", ""])).encode()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server()
    gzipped = gzip.compress(b"\0" * 2_000_000)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        path = head.split(" ")[1]
        host = next(
            (
                line.split(":", 1)[1].strip()
                for line in head.split("\r\n")
                if line.lower().startswith("host:")
            ),
            "",
        )
        state.requests.append((path, host))
        redirects = {
            "/to-private": "http://10.0.0.7/x",
            "/to-metadata": "http://169.254.169.254/latest/meta-data/",
            "/to-file-scheme": "file:///etc/passwd",
            "/to-other-loopback": f"http://127.0.0.2:{state.port}/file.txt",
            "/sub/relative": "../file.txt",
            "/loop": "/loop",
        }
        try:
            if path == "/file.txt":
                body = b"hello download\n"
                writer.write(
                    _head(200, {"Content-Length": str(len(body)), "Content-Type": "text/plain"})
                    + body
                )
            elif path.startswith("/r/"):
                left = int(path.removeprefix("/r/"))
                target = "/file.txt" if left == 0 else f"/r/{left - 1}"
                writer.write(_head(302, {"Location": target, "Content-Length": "0"}))
            elif path in redirects:
                writer.write(_head(301, {"Location": redirects[path], "Content-Length": "0"}))
            elif path == "/big-declared":
                writer.write(_head(200, {"Content-Length": "10000000"}) + b"x" * 100)
            elif path == "/chunked-big":
                writer.write(_head(200, {"Transfer-Encoding": "chunked"}))
                for _ in range(50):
                    writer.write(b"64\r\n" + b"y" * 100 + b"\r\n")
                    await writer.drain()
                writer.write(b"0\r\n\r\n")
            elif path == "/trickle":
                # A byte every 50 ms: every read is quick, the whole never comes.
                writer.write(_head(200, {"Content-Length": "900"}))
                for _ in range(900):
                    writer.write(b"t")
                    await writer.drain()
                    await asyncio.sleep(0.05)
            elif path == "/lying":
                writer.write(_head(200, {"Content-Length": "10"}) + b"z" * 5000)
            elif path == "/short":
                writer.write(_head(200, {"Content-Length": "500"}) + b"s" * 10)
            elif path == "/gzip":
                writer.write(
                    _head(200, {"Content-Length": str(len(gzipped)), "Content-Encoding": "gzip"})
                    + gzipped
                )
            else:
                writer.write(_head(404, {"Content-Length": "0"}))
            await writer.drain()
        except ConnectionError:
            pass  # the client hung up (a download cut off)
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.port = srv.sockets[0].getsockname()[1]
    async with srv:
        yield state


def _tool(root: Path, allow: list[str], **kwargs: Any) -> Tool:
    policy = DownloadPolicy(max_bytes=LIMIT, allow=AllowList(allow), timeout=5)
    (tool,) = download_tools(Workspaces(root, quota_bytes=100_000), policy, **kwargs)
    return tool


def _files(root: Path) -> list[str]:
    """Every file in the session's workspace, staged ones included (not the lock)."""
    folder = root / "dl-1"
    found = (str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    return sorted(f for f in found if f != ".reactq/lock")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "169.254.1.1",
        "100.64.0.1",
        "100.127.255.254",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "255.255.255.255",
        "192.0.2.1",
        "198.18.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd00:ec2::254",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
        "2002:a00:1::1",
        "2001:db8::1",
    ],
)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize(
    "address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808"]
)
def test_public_addresses_pass(address: str) -> None:
    assert address_refusal(ipaddress.ip_address(address)) is None


def test_the_allow_list() -> None:
    allow = AllowList(["127.0.0.1", "10.0.0.0/8", "Mirror.Internal.", " "])
    assert allow.allows("x", ipaddress.ip_address("127.0.0.1"), 80)
    assert allow.allows("x", ipaddress.ip_address("10.9.9.9"), 443)
    assert allow.allows("mirror.internal", ipaddress.ip_address("192.168.0.1"), 443)
    assert not allow.allows("x", ipaddress.ip_address("127.0.0.2"), 80)
    assert "mirror.internal" in repr(allow)


def test_an_allow_list_entry_opens_the_web_ports_unless_it_names_its_port() -> None:
    """Issue 29 item 6: an entry alone used to open every port of its host."""
    loopback, v6 = ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("fd00::1")
    allow = AllowList(["mirror", "127.0.0.1:8080", "[fd00::1]:9000", "10.0.0.0/8:*", "hub:*"])
    assert allow.allows("mirror", loopback, 80) and allow.allows("mirror", loopback, 443)
    assert not allow.allows("mirror", loopback, 6379)
    assert allow.allows("x", loopback, 8080) and not allow.allows("x", loopback, 80)
    assert allow.allows("x", v6, 9000) and not allow.allows("x", v6, 443)
    assert allow.allows("x", ipaddress.ip_address("10.1.2.3"), 5432)
    assert allow.allows("hub", loopback, 1) and allow.allows("hub", loopback, 65535)
    assert AllowList(["h", "h:8080"]).allows("h", loopback, 8080)
    for bad in ("h:0", "h:65536", "h:http", "[fd00::1", "[fd00::1]8080", "a b", "h/x"):
        with pytest.raises(ValueError, match="allow-list entry"):
            AllowList([bad])
    for name in ("REACTQ_DOWNLOAD_ALLOW_HOSTS", "REACTQ_WEBHOOK_ALLOW_HOSTS"):
        with pytest.raises(ConfigError, match=f"{name}: .*the port must be 1-65535"):
            Settings.from_env({name: "ok.example,h:99999"})


async def test_a_host_on_the_list_is_refused_on_a_port_it_does_not_name(
    server: Server, tmp_path: Path
) -> None:
    with pytest.raises(ToolError, match=rf"opens it on other ports, not {server.port}"):
        await _tool(tmp_path, allow=["127.0.0.1"]).call({"url": f"{server.base}/file.txt"}, CTX)
    assert server.requests == []
    tool = _tool(tmp_path, allow=[f"127.0.0.1:{server.port}"])
    assert "Downloaded 15 bytes" in await tool.call({"url": f"{server.base}/file.txt"}, CTX)


async def test_a_trickling_server_is_cut_off_by_the_total_deadline(
    server: Server, tmp_path: Path
) -> None:
    """Issue 29 item 6: every read came within the step timeout, so a byte a second held
    the download for the tool's whole 300 s."""
    policy = DownloadPolicy(
        max_bytes=LIMIT, allow=AllowList(["127.0.0.1:*"]), timeout=5, deadline=0.5
    )
    (tool,) = download_tools(Workspaces(tmp_path, quota_bytes=100_000), policy)
    with pytest.raises(ToolError, match=r"took over 0\.5 s in all and was stopped") as raised:
        await tool.call({"url": f"{server.base}/trickle"}, CTX)
    assert raised.value.code == "download_error"
    assert _files(tmp_path) == []
    settings = Settings.from_env({"REACTQ_DOWNLOAD_DEADLINE_SECONDS": "7"})
    assert settings.download_deadline_seconds == 7


async def test_a_local_server_is_refused_by_default(server: Server, tmp_path: Path) -> None:
    tool = _tool(tmp_path, allow=[])
    with pytest.raises(ToolError, match=r"resolves to 127\.0\.0\.1, a loopback address") as raised:
        await tool.call({"url": f"{server.base}/file.txt"}, CTX)
    assert raised.value.code == "download_error"
    assert server.requests == [], "a refused address must not be contacted"
    assert _files(tmp_path) == []


async def test_a_download_lands_in_downloads(server: Server, tmp_path: Path) -> None:
    tool = _tool(tmp_path, allow=["127.0.0.1:*"])
    assert tool.writes
    out = await tool.call({"url": f"{server.base}/file.txt#frag"}, CTX)
    assert out == (
        f"Downloaded 15 bytes from {server.base}/file.txt to downloads/file.txt (text/plain)."
    )
    assert (tmp_path / "dl-1" / "downloads" / "file.txt").read_bytes() == b"hello download\n"
    assert _files(tmp_path) == ["downloads/file.txt"]  # no staged leftovers
    with pytest.raises(ToolError, match="exists already"):
        await tool.call({"url": f"{server.base}/file.txt", "path": "downloads/file.txt"}, CTX)
    with pytest.raises(ToolError, match="already exists"):
        await tool.call({"url": f"{server.base}/file.txt"}, CTX)  # the default name, taken
    out = await tool.call({"url": f"{server.base}/file.txt", "path": "data/"}, CTX)
    assert out.endswith("to data/file.txt (text/plain).")
    assert (tmp_path / "dl-1" / "downloads" / "file.txt").read_bytes() == b"hello download\n"


async def test_a_redirect_chain_is_followed_and_checked(server: Server, tmp_path: Path) -> None:
    tool = _tool(tmp_path, allow=["127.0.0.1:*"])
    out = await tool.call({"url": f"{server.base}/r/3", "path": "got.txt"}, CTX)
    assert f"from {server.base}/file.txt to got.txt" in out
    assert [p for p, _ in server.requests] == ["/r/3", "/r/2", "/r/1", "/r/0", "/file.txt"]
    out = await tool.call({"url": f"{server.base}/sub/relative", "path": "rel.txt"}, CTX)
    assert "to rel.txt" in out
    with pytest.raises(ToolError, match="more than 5 redirects"):
        await tool.call({"url": f"{server.base}/loop"}, CTX)


@pytest.mark.parametrize(
    ("path", "refusal"),
    [
        ("/to-private", r"10\.0\.0\.7, a private address"),
        ("/to-metadata", "a cloud metadata address"),
        ("/to-file-scheme", "only http and https"),
        ("/to-other-loopback", r"127\.0\.0\.2, a loopback address"),
    ],
)
async def test_a_redirect_inside_the_network_is_refused_mid_chain(
    server: Server, tmp_path: Path, path: str, refusal: str
) -> None:
    tool = _tool(tmp_path, allow=["127.0.0.1:*"])
    with pytest.raises(ToolError, match=refusal):
        await tool.call({"url": f"{server.base}{path}"}, CTX)
    assert [p for p, _ in server.requests] == [path]  # the first hop only
    assert _files(tmp_path) == []


async def test_metadata_stays_refused_even_when_allowed(tmp_path: Path) -> None:
    tool = _tool(tmp_path, allow=["169.254.169.254", "169.254.0.0/16"])
    with pytest.raises(ToolError, match="a cloud metadata address"):
        await tool.call({"url": "http://169.254.169.254/latest/meta-data/"}, CTX)


@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        ("ftp://example.com/x", "only http and https"),
        ("http://user:pw@example.com/", "credentials"),
        ("http:///nohost", "names no host"),
        ("not a url at all", "only http and https"),
        ("http://[::1", "not a valid URL"),
    ],
)
async def test_bad_urls_are_refused(tmp_path: Path, url: str, refusal: str) -> None:
    with pytest.raises(ToolError, match=refusal):
        await _tool(tmp_path, allow=[]).call({"url": url}, CTX)


async def test_the_connection_goes_to_the_checked_address(server: Server, tmp_path: Path) -> None:
    """The name is resolved once per hop, every answer is checked, and the request goes
    to a checked address with the name in Host: no second lookup can redirect it."""
    lookups: list[str] = []
    answers = {
        "files.example": ["127.0.0.1"],
        "mixed.example": ["127.0.0.1", "10.1.1.1"],
    }

    async def resolver(host: str, port: int) -> list[Any]:
        lookups.append(host)
        return [ipaddress.ip_address(a) for a in answers[host]]

    tool = _tool(tmp_path, allow=["127.0.0.1:*"], resolver=resolver)
    await tool.call({"url": f"http://files.example:{server.port}/file.txt"}, CTX)
    assert lookups == ["files.example"]
    assert server.requests == [("/file.txt", f"files.example:{server.port}")]
    with pytest.raises(ToolError, match=r"resolves to 10\.1\.1\.1, a private address"):
        await tool.call({"url": f"http://mixed.example:{server.port}/file.txt"}, CTX)
    assert len(server.requests) == 1


async def test_the_size_is_capped_by_the_header_and_by_the_count(
    server: Server, tmp_path: Path
) -> None:
    tool = _tool(tmp_path, allow=["127.0.0.1:*"])
    with pytest.raises(ToolError, match="10000000 bytes, over the 1000-byte limit"):
        await tool.call({"url": f"{server.base}/big-declared"}, CTX)
    # No length announced: counted while it streams, cut off, the partial file removed.
    with pytest.raises(ToolError, match="passed the 1000-byte limit and was cut off"):
        await tool.call({"url": f"{server.base}/chunked-big"}, CTX)
    # A body that ends before its announced length fails and leaves nothing.
    with pytest.raises(ToolError, match="without sending complete message body"):
        await tool.call({"url": f"{server.base}/short"}, CTX)
    assert _files(tmp_path) == []
    # A body longer than its header: only the announced bytes are the file.
    await tool.call({"url": f"{server.base}/lying", "path": "lying.bin"}, CTX)
    assert (tmp_path / "dl-1" / "lying.bin").read_bytes() == b"z" * 10
    # Compressed content is stored as sent: nothing inflates past the cap.
    big_policy = DownloadPolicy(max_bytes=100_000, allow=AllowList(["127.0.0.1:*"]), timeout=5)
    (big,) = download_tools(Workspaces(tmp_path, quota_bytes=1_000_000), big_policy)
    await big.call({"url": f"{server.base}/gzip", "path": "z.gz"}, CTX)
    stored = (tmp_path / "dl-1" / "z.gz").read_bytes()
    assert gzip.decompress(stored) == b"\0" * 2_000_000 and len(stored) < 10_000


async def test_the_quota_caps_a_download(server: Server, tmp_path: Path) -> None:
    policy = DownloadPolicy(max_bytes=10_000, allow=AllowList(["127.0.0.1:*"]), timeout=5)
    (tool,) = download_tools(Workspaces(tmp_path, quota_bytes=500), policy)
    with pytest.raises(ToolError, match=r"the 500-byte limit \(what the workspace quota leaves\)"):
        await tool.call({"url": f"{server.base}/chunked-big"}, CTX)
    assert _files(tmp_path) == []


async def test_the_allow_list_comes_from_the_settings(server: Server, tmp_path: Path) -> None:
    env = {"REACTQ_WORKSPACE_ROOT": str(tmp_path), "REACTQ_DOWNLOAD_ALLOW_HOSTS": "127.0.0.1:*"}
    tools = {t.name: t for t in file_tools(Settings.from_env(env), download=True)}
    out = await tools["download_file"].call({"url": f"{server.base}/file.txt"}, CTX)
    assert out.startswith("Downloaded 15 bytes")
    plain = {
        t.name: t
        for t in file_tools(
            Settings.from_env({"REACTQ_WORKSPACE_ROOT": str(tmp_path)}), download=True
        )
    }
    with pytest.raises(ToolError, match="loopback"):
        await plain["download_file"].call({"url": f"{server.base}/file.txt", "path": "x"}, CTX)


@pytest.fixture
def certificate(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for files.example (the test's own CA)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=files.example",
            "-addext",
            "subjectAltName=DNS:files.example",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


async def test_https_checks_the_name_while_connecting_to_the_pinned_address(
    certificate: tuple[Path, Path], tmp_path: Path
) -> None:
    """The request goes to the checked IP, yet TLS sends the name (SNI) and verifies
    the certificate against it."""
    cert, key = certificate

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        assert f"Host: files.example:{port}" in head
        writer.write(_head(200, {"Content-Length": "2"}) + b"ok")
        await writer.drain()
        writer.close()

    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    names: list[str] = []
    server_tls.sni_callback = lambda obj, name, ctx: names.append(name)  # type: ignore[assignment,func-returns-value]
    srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_tls)
    port = srv.sockets[0].getsockname()[1]

    async def resolver(host: str, port: int) -> list[Any]:
        return [ipaddress.ip_address("127.0.0.1")]

    trust = ssl.create_default_context(cafile=str(cert))
    policy = DownloadPolicy(
        max_bytes=LIMIT, allow=AllowList(["127.0.0.1:*"]), timeout=5, verify=trust
    )
    (tool,) = download_tools(Workspaces(tmp_path, quota_bytes=10_000), policy, resolver=resolver)
    async with srv:
        out = await tool.call({"url": f"https://files.example:{port}/a.txt"}, CTX)
        assert out.startswith("Downloaded 2 bytes") and names == ["files.example"]
        # Another name on the same address: the certificate does not match, refused.
        with pytest.raises(ToolError, match=r"certificate is not valid for 'other\.example'"):
            await tool.call({"url": f"https://other.example:{port}/a.txt"}, CTX)
    assert (tmp_path / "dl-1" / "downloads" / "a.txt").read_bytes() == b"ok"


async def test_a_webhook_allow_list_entry_opens_the_web_ports_unless_it_names_its_port() -> None:
    """REACTQ_WEBHOOK_ALLOW_HOSTS shares the allow list (``shared/netcheck.py``)."""
    url = "http://127.0.0.1:8080/hook"
    with pytest.raises(WebhookRefusedError, match="opens it on other ports, not 8080"):
        await check_url(url, AllowList(["127.0.0.1"]))
    await check_url(url, AllowList(["127.0.0.1:8080"]))
    await check_url("http://127.0.0.1/hook", AllowList(["127.0.0.1"]))
