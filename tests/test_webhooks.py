"""Webhooks on real parts: a receiver on 127.0.0.1 that checks the signature the way
the README tells receivers to, real ``reactq worker`` processes, the scripted model.

A turn's end is POSTed once, signed; a receiver that fails is retried with backoff
and the attempts show in the turn's status; a URL that is not public is refused at
submit (nothing enqueued); turns that never ran (cancelled while queued) deliver too.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.shared.errors import WebhookRefusedError
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnStatus
from tests.helpers import running_pool, sleepy_lookup, wait_until

pytestmark = pytest.mark.e2e

SECRET = "whsec-test-0123456789"


@dataclass
class Delivery:
    """One request the receiver got."""

    headers: dict[str, str]
    body: bytes
    at: float
    valid: bool


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that answers 500 to its first ``failures`` requests
    of each turn, then 200, and keeps every request."""

    failures: int = 0
    got: list[Delivery] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)
    hold: threading.Event | None = None
    """When set, the first request of each turn gets no answer until the event is set."""

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                receiver.got.append(Delivery(headers, body, time.time(), verify(headers, body)))
                turn = json.loads(body)["turn_id"]
                receiver.seen[turn] = receiver.seen.get(turn, 0) + 1
                if receiver.hold is not None and receiver.seen[turn] == 1:
                    receiver.hold.wait(60)
                code = 500 if receiver.seen[turn] <= receiver.failures else 200
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def of(self, turn_id: str) -> list[Delivery]:
        return [d for d in self.got if json.loads(d.body)["turn_id"] == turn_id]


def verify(headers: dict[str, str], body: bytes, tolerance: float = 300) -> bool:
    """The README's receiver check, written out here independently of reactq."""
    timestamp = headers.get("reactq-timestamp", "")
    signature = headers.get("reactq-signature", "")
    if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > tolerance:
        return False
    expected = hmac.new(SECRET.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return hmac.compare_digest(signature, "v1=" + expected.hexdigest())


@pytest.fixture(scope="module")
def pool(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("webhooks")
    with running_pool(
        redis_url,
        f"{namespace}-webhooks",
        tmp,
        sleepy_lookup,
        agents="tests.pool_agents:agent",
        REACTQ_WEBHOOK_SECRET=SECRET,
        REACTQ_WEBHOOK_ALLOW_HOSTS="127.0.0.1:*",
        REACTQ_WEBHOOK_BACKOFF_SECONDS="0.4",
    ) as env:
        yield env


@pytest.fixture
async def producer(pool: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool)) as p:
        yield p


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def sid() -> str:
    return f"wh-{uuid.uuid4().hex[:10]}"


async def test_completed_turn_delivers_once_signed(producer: Producer, receiver: Receiver) -> None:
    handle = await producer.submit(sid(), "hello", agent="e2e", webhook=receiver.url())
    final = await handle.result(timeout=30)
    assert final.status is TurnStatus.COMPLETED
    await wait_until(lambda: receiver.of(handle.turn_id), 15, "the webhook")
    info = await producer.turn_info(handle.turn_id)
    assert info is not None and info.webhook is not None
    await wait_until(
        lambda: _delivered(producer, handle.turn_id), 10, "the delivery recorded as delivered"
    )
    await asyncio.sleep(1.0)  # a second delivery would have come by now
    [delivery] = receiver.of(handle.turn_id)
    assert delivery.valid, delivery.headers
    assert delivery.headers["reactq-delivery"] == handle.turn_id
    body = json.loads(delivery.body)
    assert body["status"] == "completed"
    assert body["session_id"] == handle.session_id
    assert body["final"]["type"] == "final"
    assert body["final"]["text"] == final.text
    assert body["final"]["id"] == final.id
    info = await producer.turn_info(handle.turn_id)
    assert info is not None and info.webhook is not None
    assert info.webhook.url == receiver.url()
    assert [a.status_code for a in info.webhook.attempts] == [200]


async def _delivered(producer: Producer, turn_id: str) -> bool:
    info = await producer.turn_info(turn_id)
    return info is not None and info.webhook is not None and info.webhook.state == "delivered"


async def test_failing_receiver_is_retried_with_backoff(
    producer: Producer, receiver: Receiver
) -> None:
    receiver.failures = 2
    handle = await producer.submit(sid(), "retry me", agent="e2e", webhook=receiver.url())
    await handle.result(timeout=30)
    await wait_until(lambda: _delivered(producer, handle.turn_id), 30, "the third attempt")
    deliveries = receiver.of(handle.turn_id)
    assert len(deliveries) == 3
    assert all(d.valid for d in deliveries)
    assert [d.headers["reactq-attempt"] for d in deliveries] == ["1", "2", "3"]
    # Identical bodies (one delivery, three attempts); backoff 0.4 s, then 0.8 s.
    assert len({d.body for d in deliveries}) == 1
    gaps = [b.at - a.at for a, b in itertools.pairwise(deliveries)]
    assert gaps[0] >= 0.35 and gaps[1] >= 0.75, gaps
    info = await producer.turn_info(handle.turn_id)
    assert info is not None and info.webhook is not None
    attempts = info.webhook.attempts
    assert [a.attempt for a in attempts] == [1, 2, 3]
    assert [a.status_code for a in attempts] == [500, 500, 200]
    assert [a.ok for a in attempts] == [False, False, True]
    assert attempts[0].next_attempt_at is not None and attempts[2].next_attempt_at is None


@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3/hook",  # private
        "http://127.0.0.1:9/hook",  # loopback (not allowed for this producer)
        "http://169.254.169.254/latest",  # cloud metadata
        "ftp://example.com/hook",  # not http(s)
        "http://user:pw@example.com/hook",  # credentials
    ],
)
async def test_refused_url_is_refused_at_submit(pool: dict[str, str], url: str) -> None:
    settings = Settings.from_env({**pool, "REACTQ_WEBHOOK_ALLOW_HOSTS": ""})
    session = sid()
    async with Producer(settings) as producer:
        with pytest.raises(WebhookRefusedError) as caught:
            await producer.submit(session, "hello", agent="e2e", webhook=url)
        assert caught.value.code == "webhook_refused"
        # Nothing enqueued: no pending turn, no event, no status.
        assert await producer.redis.llen(producer.keys.pending(session)) == 0
        assert await producer.redis.xlen(producer.keys.events(session)) == 0
        assert await producer.redis.hlen(producer.keys.turns(session)) == 0


async def test_cancelled_while_queued_turn_delivers(producer: Producer, receiver: Receiver) -> None:
    session = sid()
    running = await producer.submit(session, "sleep=1.5 first", agent="e2e")
    queued = await producer.submit(session, "second", agent="e2e", webhook=receiver.url())
    result = await producer.cancel(queued.turn_id)
    assert result.outcome.value == "cancelled"
    final = await queued.result(timeout=10)
    assert final.status is TurnStatus.CANCELLED
    await wait_until(lambda: _delivered(producer, queued.turn_id), 15, "the webhook")
    [delivery] = receiver.of(queued.turn_id)
    assert delivery.valid
    body = json.loads(delivery.body)
    assert body["status"] == "cancelled" and body["final"]["attempt"] == 0
    await running.result(timeout=30)
    assert receiver.of(running.turn_id) == []  # no webhook asked for it


async def test_rejected_turn_delivers(producer: Producer, receiver: Receiver) -> None:
    session = sid()
    running = await producer.submit(session, "sleep=1.5 busy", agent="e2e")
    await wait_until(
        lambda: _status_is(producer, running.turn_id, TurnStatus.RUNNING), 15, "the turn running"
    )
    turn_id = ""
    with pytest.raises(Exception) as caught:
        await producer.submit(
            session, "no room", agent="e2e", strategy="reject", webhook=receiver.url()
        )
    turn_id = caught.value.details["turn_id"]  # type: ignore[attr-defined]
    await wait_until(lambda: _delivered(producer, turn_id), 15, "the webhook")
    [delivery] = receiver.of(turn_id)
    assert delivery.valid and json.loads(delivery.body)["status"] == "rejected"
    await running.result(timeout=30)


async def _status_is(producer: Producer, turn_id: str, status: TurnStatus) -> bool:
    return await producer.turn_status(turn_id) is status


def test_agent_default_webhook(
    redis_url: str, namespace: str, tmp_path: Path, receiver: Receiver
) -> None:
    """``Agent(webhook=...)`` applies to turns submitted without one."""
    with running_pool(
        redis_url,
        f"{namespace}-webhooks-agent",
        tmp_path,
        sleepy_lookup,
        agents="tests.webhook_agents:agent",
        REACTQ_WEBHOOK_SECRET=SECRET,
        REACTQ_WEBHOOK_ALLOW_HOSTS="127.0.0.1:*",
        REACTQ_TEST_AGENT_WEBHOOK=receiver.url("/agent-default"),
    ) as env:

        async def go() -> str:
            async with Producer(Settings.from_env(env)) as producer:
                handle = await producer.submit(sid(), "hi", agent="hooked")
                await handle.result(timeout=30)
                await wait_until(lambda: _delivered(producer, handle.turn_id), 15, "the webhook")
                return handle.turn_id

        turn_id = asyncio.run(go())
    [delivery] = receiver.of(turn_id)
    assert delivery.valid and json.loads(delivery.body)["status"] == "completed"
