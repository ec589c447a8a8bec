"""Shared by the gateway tests: a real `reactq serve` process, an SSE reader, a model."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from reactq.worker.agent.llm.scripted_server import Reply
from tests.conftest import free_port
from tests.helpers import ROOT, last_user_text, running_pool

REACTQ = str(Path(sys.executable).parent / "reactq")


async def slow_lookup(request: Mapping[str, Any]) -> Reply:
    """``lookup`` then answer, like ``lookup_then_answer``; messages with "slow" in them
    take 0.5 s a step, so a test can watch (or interrupt) a turn while it runs."""
    text = last_user_text(request)
    if "slow" in text:
        await asyncio.sleep(0.5)
    if request["messages"][-1]["role"] == "user":
        return Reply.tool_calls([("lookup", {"key": text})])
    return Reply.text(f"answer to: {text}")


@dataclass
class Gateway:
    """A running `reactq serve` process."""

    url: str
    key: str | None
    proc: subprocess.Popen[bytes]
    log: Path

    def headers(self, **extra: str) -> dict[str, str]:
        out = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        return {**out, **extra}

    def client(self, key: str | None = None, **kwargs: Any) -> httpx2.Client:
        """A client of the gateway, with ``key`` (else the gateway's own) as its API key."""
        kwargs.setdefault("timeout", httpx2.Timeout(20.0))
        headers = {"Authorization": f"Bearer {key}"} if key else self.headers()
        return httpx2.Client(base_url=self.url, headers=headers, **kwargs)

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@contextlib.contextmanager
def gateway_over_pool(
    redis_url: str,
    namespace: str,
    tmp: Path,
    model: Callable[[Mapping[str, Any]], Reply],
    keys: str,
    key: str,
    agents: str = "tests.pool_agents:agents",
    **env: str,
) -> Iterator[Gateway]:
    """A real pool (``running_pool``, the scripted ``model``) with `reactq serve` in
    front of it, its API keys ``keys`` (``key`` the one it is checked with); ``env``
    added for the gateway."""
    with running_pool(redis_url, namespace, tmp, model, agents=agents) as pool:
        gw = start_gateway({**pool, "REACTQ_API_KEYS": keys, **env}, tmp, key)
        try:
            yield gw
        finally:
            gw.stop()


def start_gateway(
    env: Mapping[str, str],
    log_dir: Path,
    key: str | None,
    *args: str,
    port: int | None = None,
    name: str = "gateway",
    timeout: float = 90,
) -> Gateway:
    """Start `reactq serve` on a free loopback port and wait (``timeout`` seconds at
    most) for /healthz."""
    port = port or free_port()
    log = log_dir / f"{name}-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [REACTQ, "serve", "--host", "127.0.0.1", "--port", str(port), *args],
            cwd=ROOT,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    gateway = Gateway(f"http://127.0.0.1:{port}", key, proc, log)
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the gateway exited:\n{gateway.logs()}")
        try:
            if httpx2.get(f"{gateway.url}/healthz", timeout=1).status_code == 200:
                return gateway
        except httpx2.TransportError:
            pass
        if time.monotonic() > deadline:
            gateway.stop()
            raise AssertionError(f"the gateway did not answer in {timeout:g} s:\n{gateway.logs()}")
        time.sleep(0.05)


@dataclass
class SSE:
    """One Server-Sent Events message."""

    id: str | None
    event: str | None
    data: dict[str, Any]


@dataclass
class SSEReader:
    """Parses a text/event-stream line by line; keeps comments apart."""

    lines: Iterator[str]
    comments: list[str] = field(default_factory=list)
    retry: int | None = None

    def __iter__(self) -> Iterator[SSE]:
        event_id: str | None = None
        kind: str | None = None
        data: list[str] = []
        for line in self.lines:
            if line == "":
                if data:
                    yield SSE(event_id, kind, json.loads("\n".join(data)))
                event_id, kind, data = None, None, []
                continue
            if line.startswith(":"):
                self.comments.append(line)
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = value
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)
            elif name == "retry":
                self.retry = int(value)


def read_until(
    client: httpx2.Client,
    url: str,
    stop: Any,
    headers: dict[str, str] | None = None,
    limit: int = 1000,
) -> list[SSE]:
    """GET an event stream and read messages until ``stop(message)`` is true (inclusive)."""
    out: list[SSE] = []
    with client.stream("GET", url, headers=headers or {}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for message in SSEReader(response.iter_lines()):
            out.append(message)
            if stop(message) or len(out) >= limit:
                break
    return out


# --- raw sockets: clients that misbehave on purpose ----------------------------------------


@dataclass
class RawStream:
    """An HTTP/1.1 response read off a raw socket, its chunked body decoded by hand.

    Unlike an HTTP client library it can stall (stop reading) for as long as a test
    wants, with a receive buffer as small as the test asks for.
    """

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    ended: bool = False
    """True once the server ended the body (last chunk) or closed the connection."""
    _pending: bytes = b""
    _ready: list[dict[str, str]] = field(default_factory=list)

    async def read_head(self) -> None:
        """Read the status line and headers."""
        line = await self.reader.readline()
        if not line:
            raise ConnectionError("the server closed the connection before answering")
        self.status = int(line.split()[1])
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode().partition(":")
            self.headers[name.strip().lower()] = value.strip()

    async def chunk(self) -> bytes | None:
        """The next chunk of a chunked body; None at its end or when the connection closes."""
        if self.ended:
            return None
        size_line = await self.reader.readline()
        if not size_line or int(size_line.split(b";")[0], 16) == 0:
            self.ended = True
            return None
        data = await self.reader.readexactly(int(size_line.split(b";")[0], 16))
        await self.reader.readexactly(2)
        return data

    async def body(self) -> bytes:
        """The rest of a body with a Content-Length (or up to the connection's end)."""
        length = self.headers.get("content-length")
        if length is not None:
            return await self.reader.readexactly(int(length))
        return await self.reader.read()

    async def messages(self) -> list[dict[str, str]] | None:
        """The next complete SSE messages (at least one), each as its fields (``id``,
        ``event``, ``data``); comments and ``retry:`` are skipped; None once the stream
        ended."""
        while True:
            end = self._pending.rfind(b"\n\n")
            if end >= 0:
                block, self._pending = self._pending[:end], self._pending[end + 2 :]
                out = []
                for raw in block.split(b"\n\n"):
                    fields = {}
                    for line in raw.decode().split("\n"):
                        name, _, value = line.partition(": ")
                        if name in ("id", "event", "data"):
                            fields[name] = value
                    if "id" in fields:
                        out.append(fields)
                if out:
                    return out
                continue
            data = await self.chunk()
            if data is None:
                return None
            self._pending += data

    async def message(self) -> dict[str, str] | None:
        """The next SSE message (see ``messages``); None once the stream ended."""
        if not self._ready:
            self._ready = await self.messages() or []
        return self._ready.pop(0) if self._ready else None

    def stall(self) -> None:
        """Stop reading the socket: what the server sends piles up in the kernel's
        buffers, then in the server."""
        self.writer.transport.pause_reading()  # type: ignore[attr-defined]

    def resume(self) -> None:
        """Read the socket again."""
        self.writer.transport.resume_reading()  # type: ignore[attr-defined]

    async def close(self) -> None:
        """Close the socket (without waiting for the server)."""
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


async def raw_request(
    url: str,
    request: bytes,
    *,
    rcvbuf: int | None = None,
) -> RawStream:
    """Connect to the gateway at ``url`` with a plain socket and send ``request`` as is."""
    host, _, port = url.removeprefix("http://").partition(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        # Set before connecting, so the TCP window is small from the start.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
    except BaseException:
        sock.close()
        raise
    # A small buffer: a client that stops reading stops taking bytes off the socket.
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 16)
    writer.write(request)
    await writer.drain()
    return RawStream(reader, writer)


def get_request(path: str, headers: Mapping[str, str] | None = None) -> bytes:
    """A GET request's bytes."""
    lines = [
        f"GET {path} HTTP/1.1",
        "Host: gateway",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def open_stream(
    url: str, path: str, headers: Mapping[str, str] | None = None, *, rcvbuf: int | None = None
) -> RawStream:
    """GET an event stream on a raw socket; returns once the gateway has attached it
    to the live events (its first chunk, ``retry:``, has arrived)."""
    stream = await raw_request(url, get_request(path, headers), rcvbuf=rcvbuf)
    await stream.read_head()
    assert stream.status == 200, (stream.status, await stream.body())
    first = await stream.chunk()
    assert first is not None and first.startswith(b"retry:"), first
    return stream


_OPENAI_CLIENTS: dict[tuple[str, str, float | None], Any] = {}


def openai_client(gateway: Gateway, key: str, timeout: float | None = None) -> Any:
    """The ``openai`` SDK's client of the gateway's ``/v1`` for ``key`` (one per key,
    until ``close_openai_clients``: a client left to the garbage collector may drop its
    sockets unclosed, a ResourceWarning in whichever test runs then)."""
    import openai

    found = _OPENAI_CLIENTS.get((gateway.url, key, timeout))
    if found is None:
        options: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
        found = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0, **options)
        _OPENAI_CLIENTS[(gateway.url, key, timeout)] = found
    return found


def close_openai_clients() -> None:
    """Close every client ``openai_client`` made."""
    for made in _OPENAI_CLIENTS.values():
        made.close()
    _OPENAI_CLIENTS.clear()
