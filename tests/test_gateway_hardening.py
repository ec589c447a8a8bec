"""The gateway under attack, on real parts: a `reactq serve` process (or plain uvicorn),
a real Redis, and clients on raw sockets that misbehave on purpose.

Auth is checked before a body is read; slow headers, slow bodies and idle
connections are cut; without keys only loopback clients are served; a burst of
events reaches every reader that keeps up, and only one that really falls behind
is cut, by count or by bytes; stalled clients do not each hold a copy of a big
event; a database that does not answer is a 503; uvicorn's own log lines go
through reactq's handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest
from redis.asyncio import BlockingConnectionPool, Redis

from reactq.shared.bus_redis import RedisEventBus
from reactq.shared.events import ObservationEvent, ThoughtEvent
from reactq.shared.keys import Keys
from tests.conftest import free_port
from tests.gateway_support import (
    Gateway,
    RawStream,
    open_stream,
    raw_request,
    start_gateway,
)
from tests.helpers import ROOT

pytestmark = pytest.mark.e2e
KEY = "hardening-key-7"
AUTH = {"Authorization": f"Bearer {KEY}"}
TIMEOUT_S = 1.0
"""The gateway's request timeout in these tests (REACTQ_REQUEST_TIMEOUT_SECONDS)."""
BUFFER_BYTES = 1 << 20
"""Its per-client byte cap (REACTQ_SSE_CLIENT_BUFFER_BYTES)."""
# Generous: the state waited on comes in well under a second when all is right.
DEADLINE = 20.0


@pytest.fixture(scope="module")
def base_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("hardening")
    return {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-hard",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "REACTQ_TMP": str(tmp),
    }


@pytest.fixture(scope="module")
def gateway(base_env: dict[str, str]) -> Iterator[Gateway]:
    env = {
        **base_env,
        "REACTQ_API_KEYS": KEY,
        "REACTQ_REQUEST_TIMEOUT_SECONDS": str(TIMEOUT_S),
        "REACTQ_SSE_CLIENT_BUFFER_BYTES": str(BUFFER_BYTES),
    }
    gw = start_gateway(env, Path(base_env["REACTQ_TMP"]), KEY, name="hardened")
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
async def bus(base_env: dict[str, str]) -> AsyncIterator[RedisEventBus]:
    # A pool wide enough to publish a burst concurrently.
    redis = Redis.from_pool(
        BlockingConnectionPool.from_url(base_env["REACTQ_REDIS_URL"], max_connections=64)
    )
    bus = RedisEventBus(redis, Keys(base_env["REACTQ_NAMESPACE"]))
    try:
        yield bus
    finally:
        await bus.close()
        await redis.aclose()


def sid() -> str:
    return f"hard-{uuid.uuid4().hex[:10]}"


async def ends_within(stream: RawStream, seconds: float) -> bytes:
    """Everything the server still sends until it closes the connection (fails after
    ``seconds``)."""
    return await asyncio.wait_for(stream.reader.read(), seconds)


def post_head(path: str, length: int, headers: dict[str, str] | None = None) -> bytes:
    lines = [
        f"POST {path} HTTP/1.1",
        "Host: gateway",
        "Content-Type: application/json",
        f"Content-Length: {length}",
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def get_with_body(path: str, length: int) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: gateway\r\nContent-Length: {length}\r\n\r\n".encode()


# --- 6: without API keys, loopback clients only -----------------------------------------------


def _off_loopback_address() -> str | None:
    """An address of this machine that is not loopback (None when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            # A UDP connect sends nothing: it only picks the interface a packet would use.
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if ipaddress.ip_address(address).is_loopback else address


def _start_uvicorn(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    """``uvicorn reactq.producer.gateway:app --host 0.0.0.0``: the app as a plain server
    runs it."""
    command = [sys.executable, "-m", "uvicorn", "reactq.producer.gateway:app"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [*command, "--host", "0.0.0.0", "--port", str(port)],
            cwd=ROOT,
            env={k: v for k, v in {**os.environ, **env}.items() if k != "REACTQ_API_KEYS"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, log.read_text(errors="replace")
        with contextlib.suppress(httpx2.TransportError):
            if httpx2.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc
        assert time.monotonic() < deadline, log.read_text(errors="replace")
        time.sleep(0.05)


def test_without_keys_the_app_serves_loopback_clients_only(
    base_env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    proc = _start_uvicorn(base_env, port, tmp_path / "uvicorn.log")
    try:
        # A client a local reverse proxy forwards (uvicorn trusts X-Forwarded-For from
        # 127.0.0.1), then, when this machine has one, a client on another interface.
        clients = [("127.0.0.1", {"X-Forwarded-For": "203.0.113.7"})]
        address = _off_loopback_address()
        if address is not None:
            clients.append((address, {}))
        for host, headers in clients:
            for method, path in [("GET", "/v1/turns/t_x"), ("POST", "/v1/turns/t_x/cancel")]:
                response = httpx2.request(
                    method, f"http://{host}:{port}{path}", headers=headers, timeout=10
                )
                assert response.status_code == 403, (host, path, response.text)
                body = response.json()
                assert body["code"] == "loopback_only"
                assert "REACTQ_API_KEYS" in body["message"]
        local = httpx2.get(f"http://127.0.0.1:{port}/v1/turns/t_x", timeout=10)
        assert local.status_code == 404, local.text
    finally:
        proc.terminate()
        proc.wait(15)

    # `reactq serve --insecure` is the one way to serve others without keys.
    insecure = start_gateway(base_env, tmp_path, None, "--insecure", name="insecure")
    try:
        forwarded = httpx2.get(
            f"{insecure.url}/v1/turns/t_x", headers={"X-Forwarded-For": "203.0.113.7"}, timeout=10
        )
        assert forwarded.status_code == 404, forwarded.text
    finally:
        insecure.stop()


# --- 9: auth before the body, and read timeouts ------------------------------------------------


async def test_unauthenticated_bodies_are_refused_unread(gateway: Gateway) -> None:
    # Each client declares a 500 KB body, sends 64 KB of it and stalls: the gateway must
    # answer 401 from the headers alone and close, holding none of it.
    path = f"/v1/sessions/{sid()}/turns"
    wrong = {"Authorization": "Bearer not-the-key"}
    streams = [
        await raw_request(
            gateway.url,
            post_head(path, 500_000, wrong if n % 2 else {}) + b'{"message": "' + b"x" * 65_536,
        )
        for n in range(40)
    ]
    try:
        for stream in streams:
            await asyncio.wait_for(stream.read_head(), DEADLINE)
            rest = await ends_within(stream, DEADLINE)
            assert stream.status == 401, (stream.status, rest)
            assert stream.headers["connection"] == "close"
            assert stream.headers["www-authenticate"] == "Bearer"
            assert json.loads(rest)["code"] == "unauthorized"
    finally:
        for stream in streams:
            await stream.close()


async def test_a_client_still_sending_its_body_reads_the_refusal_not_a_reset(
    gateway: Gateway,
) -> None:
    # A client uploading a large body with a wrong key is still writing when the 401
    # goes out, and reads only once its writes are done (as HTTP clients do). Had the
    # gateway closed its socket with those bytes unread, the kernel would answer them
    # with a reset, and the client would see "connection reset", never the 401.
    path = f"/v1/sessions/{sid()}/turns"
    size = 4_000_000
    stream = await raw_request(
        gateway.url, post_head(path, size, {"Authorization": "Bearer not-the-key"})
    )
    try:
        with contextlib.suppress(OSError):
            for _ in range(size // 65_536):
                stream.writer.write(b"x" * 65_536)
                await stream.writer.drain()
        await asyncio.sleep(0.5)  # the client reads late: the gateway closed long ago
        await asyncio.wait_for(stream.read_head(), DEADLINE)
        assert stream.status == 401, stream.status
        assert json.loads(await ends_within(stream, DEADLINE))["code"] == "unauthorized"
    finally:
        await stream.close()


async def test_idle_connections_and_slow_headers_are_closed(gateway: Gateway) -> None:
    # Connected, nothing sent.
    idle = await raw_request(gateway.url, b"")
    # Half a request head, then nothing.
    partial = await raw_request(gateway.url, b"GET /healthz HTTP/1.1\r\nHost: gate")
    # Headers one line at a time, for ever: the deadline is for the whole head.
    trickle = await raw_request(gateway.url, b"GET /healthz HTTP/1.1\r\n")

    async def drip() -> None:
        with contextlib.suppress(OSError):
            for n in range(int(DEADLINE * 10)):
                trickle.writer.write(f"X-Drip-{n}: 1\r\n".encode())
                await trickle.writer.drain()
                await asyncio.sleep(0.1)

    dripping = asyncio.create_task(drip())
    # Idle after a response (keep-alive).
    kept = await raw_request(gateway.url, b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
    await kept.read_head()
    assert kept.status == 200 and json.loads(await kept.body()) == {"status": "ok"}
    try:
        idle_rest, partial_rest, trickle_rest, kept_rest = await asyncio.gather(
            ends_within(idle, DEADLINE),
            ends_within(partial, DEADLINE),
            ends_within(trickle, DEADLINE),
            ends_within(kept, DEADLINE),
        )
    finally:
        dripping.cancel()
        for stream in (idle, partial, trickle, kept):
            await stream.close()
    assert idle_rest == b"" and kept_rest == b""
    # A half-sent head is told why.
    assert partial_rest.startswith(b"HTTP/1.1 408 "), partial_rest
    assert trickle_rest.startswith(b"HTTP/1.1 408 "), trickle_rest


async def test_slow_bodies_get_408_and_unread_bodies_close_the_connection(
    gateway: Gateway,
) -> None:
    path = f"/v1/sessions/{sid()}/turns"
    # An authenticated body that never completes.
    stalled = await raw_request(gateway.url, post_head(path, 1000, AUTH) + b'{"message": ')
    # One that trickles a byte at a time: the deadline is for the whole body.
    trickled = await raw_request(gateway.url, post_head(path, 100_000, AUTH) + b"{")

    async def drip() -> None:
        with contextlib.suppress(OSError):
            for _ in range(int(DEADLINE * 10)):
                trickled.writer.write(b" ")
                await trickled.writer.drain()
                await asyncio.sleep(0.1)

    dripping = asyncio.create_task(drip())
    # A GET answered without reading the body it declared must not keep the
    # connection open for the rest of that body.
    unread = await raw_request(gateway.url, get_with_body("/healthz", 100_000) + b"y" * 1000)
    try:
        for stream in (stalled, trickled):
            await asyncio.wait_for(stream.read_head(), DEADLINE)
            assert stream.status == 408, stream.status
            assert stream.headers["connection"] == "close"
            assert json.loads(await ends_within(stream, DEADLINE))["code"] == "request_timeout"
        await asyncio.wait_for(unread.read_head(), DEADLINE)
        assert unread.status == 200 and unread.headers["connection"] == "close"
        assert json.loads(await ends_within(unread, DEADLINE)) == {"status": "ok"}
    finally:
        dripping.cancel()
        for stream in (stalled, trickled, unread):
            await stream.close()


# --- 7: a burst reaches every reader that keeps up ---------------------------------------------


def _thought(session: str, n: int, size: int = 200) -> ThoughtEvent:
    return ThoughtEvent(session_id=session, turn_id="t_burst", seq=n, text=f"{n} " + "t" * size)


async def _read_events(stream: RawStream, want: int) -> list[str]:
    """Event ids read until ``want`` of them or the end of the stream."""
    ids: list[str] = []
    while len(ids) < want:
        messages = await stream.messages()
        if messages is None:
            break
        ids += [m["id"] for m in messages]
    return ids


@pytest.mark.parametrize("readers", [10, 100])
async def test_a_burst_reaches_every_reader_that_keeps_up(
    gateway: Gateway, bus: RedisEventBus, readers: int
) -> None:
    session = sid()
    url = f"/v1/sessions/{session}/events?after=$"
    streams = await asyncio.gather(*(open_stream(gateway.url, url, AUTH) for _ in range(readers)))
    burst = 1400
    try:
        reading = [asyncio.create_task(_read_events(s, burst)) for s in streams]
        # All at once, over many connections: the gateway's pub/sub connection gets
        # them back to back.
        published = await asyncio.gather(*(bus.publish(_thought(session, n)) for n in range(burst)))
        got = await asyncio.wait_for(asyncio.gather(*reading), DEADLINE * 3)
    finally:
        for stream in streams:
            await stream.close()
    expected = sorted((e.id or "" for e in published), key=lambda i: tuple(map(int, i.split("-"))))
    cut = [len(ids) for ids in got if len(ids) < burst]
    assert not cut, f"{len(cut)} of {readers} readers were cut, after {sorted(cut)[:5]} events"
    for ids in got:
        assert ids == expected


# --- 8: the per-client buffer is capped in bytes ------------------------------------------------


async def test_a_stalled_client_is_cut_at_the_byte_cap_then_resumes(
    gateway: Gateway, bus: RedisEventBus
) -> None:
    session = sid()
    url = f"/v1/sessions/{session}/events?after=$"
    # A small receive window: the client's kernel holds next to nothing for it.
    stalled = await open_stream(gateway.url, url, AUTH, rcvbuf=4096)
    stalled.stall()
    reader = await open_stream(gateway.url, url, AUTH)
    count, size = 24, 512 * 1024
    try:
        ids = []
        for n in range(count):
            event = await bus.publish(_thought(session, n, size))
            ids.append(event.id)
            # The reader keeps up: it has each event before the next is published.
            message = await asyncio.wait_for(reader.message(), DEADLINE)
            assert message is not None and message["id"] == event.id
        # 12 MB went out, far over the cap: the stalled client was cut. Reading now, it
        # gets what was already on its way, then the end of the stream.
        stalled.resume()
        got = await asyncio.wait_for(_read_events(stalled, count), DEADLINE)
        assert stalled.ended and len(got) < count, len(got)
        assert got == ids[: len(got)]
        # It resumes from its last id and misses nothing.
        resumed = await open_stream(
            gateway.url, f"/v1/sessions/{session}/events", {**AUTH, "Last-Event-ID": got[-1]}
        )
        rest = await asyncio.wait_for(_read_events(resumed, count - len(got)), DEADLINE)
        await resumed.close()
        assert got + rest == ids
    finally:
        await stalled.close()
        await reader.close()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def test_stalled_clients_do_not_each_hold_a_copy_of_a_big_event(
    gateway: Gateway, bus: RedisEventBus
) -> None:
    session = sid()
    big = ObservationEvent(
        session_id=session, turn_id="t_big", seq=1, tool="dump", output="o" * (10 << 20)
    )
    await bus.publish(big)
    clients = 16
    before = _rss_mib(gateway.proc.pid)
    streams = []
    try:
        for _ in range(clients):
            # Replay from the start; read the first piece of the big event (so the gateway
            # has it in hand and is sending it), then stall.
            stream = await open_stream(
                gateway.url, f"/v1/sessions/{session}/events?after=0", AUTH, rcvbuf=4096
            )
            streams.append(stream)
            first = await asyncio.wait_for(stream.chunk(), DEADLINE)
            assert first is not None and first.startswith(b"id: ")
            stream.stall()
        grown = _rss_mib(gateway.proc.pid) - before
    finally:
        for stream in streams:
            await stream.close()
    # Before: each stalled client held its own copies (~17 MiB apiece).
    assert grown < 80, f"RSS grew {grown:.0f} MiB for {clients} stalled clients of one 10 MiB event"


# --- 12: a database that does not answer is a 503 ------------------------------------------------


def test_messages_with_the_database_down_is_503(base_env: dict[str, str], tmp_path: Path) -> None:
    env = {
        **base_env,
        "REACTQ_API_KEYS": KEY,
        # A PostgreSQL URL on a port nothing listens on.
        "REACTQ_DATABASE_URL": f"postgresql+asyncpg://127.0.0.1:{free_port()}/x",
    }
    gw = start_gateway(env, tmp_path, KEY, name="nodb")
    try:
        with gw.client() as client:
            response = client.get(f"/v1/sessions/{sid()}/messages")
            assert response.status_code == 503, response.text
            body = response.json()
            assert body["code"] == "unavailable" and "state store" in body["message"]
            ready = client.get("/readyz")
            assert ready.status_code == 503
            assert ready.json()["checks"]["state_store"].startswith("unavailable")
    finally:
        gw.stop()
    assert "Traceback" not in gw.log.read_text(errors="replace")


# --- 13: uvicorn's own loggers go through reactq's handler ------------------------------------


def test_uvicorn_log_lines_are_json_and_redacted(base_env: dict[str, str], tmp_path: Path) -> None:
    leaked = "leaky-query-value-31337"
    env = {**base_env, "REACTQ_API_KEYS": KEY, "REACTQ_LOG_FORMAT": "json"}
    gw = start_gateway(env, tmp_path, KEY, name="logs")
    try:
        with gw.client() as client:
            client.get("/v1/turns/t_x", params={"api_key": leaked})
        # Not HTTP at all: uvicorn's protocol logs a warning about it.
        with socket.create_connection(("127.0.0.1", int(gw.url.rsplit(":", 1)[1]))) as sock:
            sock.sendall(b"\x16\x03\x01 not http\r\n\r\n")
            sock.recv(4096)
    finally:
        gw.stop()
    text = gw.log.read_text(errors="replace")
    assert leaked not in text and KEY not in text
    records = []
    for line in text.splitlines():
        if line.strip():
            records.append(json.loads(line))  # every line is a JSON record
    loggers = {r["logger"] for r in records}
    assert {"uvicorn.error", "uvicorn.access"} <= loggers, loggers
    access = [r for r in records if r["logger"] == "uvicorn.access"]
    assert any("/v1/turns/t_x?api_key=[REDACTED]" in r["message"] for r in access), access
