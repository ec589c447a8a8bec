"""Input the gateway must refuse with a 422 before it reaches Redis, on real parts: a
`reactq serve` process and a real Redis (no worker: nothing here is meant to run).

Stream ids outside what Redis accepts (Unicode digits, numbers over 2**64-1), in
``?after=`` and in ``Last-Event-ID``; text UTF-8 cannot carry (a lone surrogate) in
a turn's message or metadata; session ids a URL cannot hold (``.``, ``..``) or with
a trailing newline. Requests go out on raw sockets where an HTTP client would
normalise the path (``/./`` and ``/../`` segments) or refuse the header.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import httpx2
import pytest
from redis.asyncio import Redis

from reactq.shared.keys import Keys
from reactq.shared.protocol.workers import WorkerRegistry
from tests.gateway_support import Gateway, get_request, open_stream, raw_request, start_gateway

pytestmark = pytest.mark.e2e
KEY = "input-key-3"
AUTH = {"Authorization": f"Bearer {KEY}"}
AGENT = "alpha"
MAX = 2**64 - 1
"""The largest milliseconds or sequence number of a Redis stream id."""

BAD_STREAM_IDS = [
    "\u0661\u0662",  # Arabic-Indic digits: `\d` matches them, Redis does not
    "\u0661\u0662-\u0663",
    "99999999999999999999",  # 20 digits, over 2**64-1
    str(MAX + 1),
    f"1-{MAX + 1}",
    f"{MAX + 1}-0",
    "12\n",
]


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("input")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-input",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "REACTQ_API_KEYS": KEY,
        "REACTQ_SSE_HEARTBEAT_SECONDS": "0.3",
    }

    async def announce() -> None:
        # A worker's announcement, without a worker: the submits here are all refused
        # before anything is enqueued.
        redis = Redis.from_url(redis_url)
        try:
            await WorkerRegistry(redis, Keys(env["REACTQ_NAMESPACE"])).register_agents(
                [AGENT], "input-test"
            )
        finally:
            await redis.aclose()

    asyncio.run(announce())
    gw = start_gateway(env, tmp, KEY, name="input")
    try:
        yield gw
    finally:
        gw.stop()


@pytest.fixture
def client(gateway: Gateway) -> Iterator[httpx2.Client]:
    with gateway.client() as c:
        yield c


def sid() -> str:
    return f"in-{uuid.uuid4().hex[:10]}"


async def answer(gateway: Gateway, request: bytes) -> tuple[int, bytes]:
    """Send ``request`` as is; the status and, unless it is a stream, the body."""
    stream = await raw_request(gateway.url, request)
    try:
        await asyncio.wait_for(stream.read_head(), 10)
        if stream.status == 200:
            return 200, b""
        return stream.status, await asyncio.wait_for(stream.body(), 10)
    finally:
        await stream.close()


def post_request(path: str, body: bytes) -> bytes:
    head = [
        f"POST {path} HTTP/1.1",
        "Host: gateway",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
        *(f"{k}: {v}" for k, v in AUTH.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


# --- 5. stream ids -----------------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_STREAM_IDS)
def test_a_stream_id_redis_would_refuse_is_422_in_after(client: httpx2.Client, bad: str) -> None:
    # Before: 200, then Redis's ResponseError broke the stream, and a browser
    # reconnected every second for ever.
    response = client.get(f"/v1/sessions/{sid()}/events", params={"after": bad})
    assert response.status_code == 422, response.text
    assert response.json()["field"] == "query.after"


@pytest.mark.parametrize("bad", [b for b in BAD_STREAM_IDS if "\n" not in b])
async def test_a_stream_id_redis_would_refuse_is_422_in_last_event_id(
    gateway: Gateway, bad: str
) -> None:
    # Raw bytes: an HTTP client would refuse the non-ASCII values (the server reads a
    # header as Latin-1, so those never looked like digits; the big numbers did).
    headers = {**AUTH, "Last-Event-ID": bad}
    status, body = await answer(gateway, get_request(f"/v1/sessions/{sid()}/events", headers))
    assert status == 422, body
    assert b'"field":"header.Last-Event-ID"' in body, body


@pytest.mark.parametrize(
    "edge", ["0", "0-0", str(MAX), f"{MAX}-{MAX}", f"{MAX}-0", "1-1", "00000000000000000007"]
)
async def test_ids_at_the_edge_of_the_range_stream(gateway: Gateway, edge: str) -> None:
    # The largest id is an id: nothing follows it, but the stream stays up (before,
    # XRANGE refused "(" before it and the stream broke).
    for query, headers in [(f"?after={edge}", AUTH), ("", {**AUTH, "Last-Event-ID": edge})]:
        stream = await open_stream(gateway.url, f"/v1/sessions/{sid()}/events{query}", headers)
        try:
            keep_alive = await asyncio.wait_for(stream.chunk(), 10)
            assert keep_alive == b": keep-alive\n\n", keep_alive
        finally:
            await stream.close()


# --- 10. text UTF-8 cannot carry ------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        (
            rb'{"message": "hi", "agent": "alpha", "metadata": {"k": "\ud800"}}',
            "metadata",
            "invalid_metadata",
        ),
        (
            rb'{"message": "hi", "agent": "alpha", "metadata": {"\udfff": 1}}',
            "metadata",
            "invalid_metadata",
        ),
        (
            rb'{"message": "hi", "agent": "alpha", "metadata": {"k": ["\ud800x"]}}',
            "metadata",
            "invalid_metadata",
        ),
        # The message is text or content parts: the producer's own check names it.
        (rb'{"message": "hi \ud800", "agent": "alpha"}', "message", "invalid_message"),
    ],
)
def test_a_lone_surrogate_is_422_not_500(
    client: httpx2.Client, body: bytes, field: str, code: str
) -> None:
    # JSON may spell a lone surrogate ("\ud800"); UTF-8 cannot carry it. Before: a 500
    # for a value (the payload could not be serialised), and a 202 for a key, whose
    # payload went out as invalid UTF-8 that no worker could read.
    response = client.post(
        f"/v1/sessions/{sid()}/turns", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    error = response.json()
    assert error["field"] == f"body.{field}", error
    assert error["code"] == code, error


# --- 11. session ids ----------------------------------------------------------------------


@pytest.mark.parametrize("session", [".", "..", "%2E", "%2e%2E", "abc%0A"])
@pytest.mark.parametrize("route", ["events", "messages", "turns"])
async def test_session_ids_a_url_cannot_hold_are_422(
    gateway: Gateway, session: str, route: str
) -> None:
    path = f"/v1/sessions/{session}/{route}"
    if route == "turns":
        request = post_request(path, b'{"message": "hi", "agent": "alpha"}')
    else:
        request = get_request(path, AUTH)
    status, body = await answer(gateway, request)
    # Before: "." and ".." were accepted, and the events_url of a submit pointed at
    # /v1/sessions/./events, which every client normalises into a 404.
    assert status == 422, (status, body)
    assert b'"field":"path.session_id"' in body, body


async def test_session_ids_with_dots_inside_are_fine(gateway: Gateway) -> None:
    for session in ["...", ".a", "a.", "a..b", "..a"]:
        stream = await open_stream(gateway.url, f"/v1/sessions/{session}/events?after=$", AUTH)
        await stream.close()
