"""A turn submitted while the Celery broker is down, on real parts: a private
redis-server as the broker (stopped, then started again on the same port), real
Redis for the turns, a real ``reactq worker``.

The submit returns at once with the turn safe in Redis (a warning says the dispatch
waits for the broker); once the broker is back, the reaper dispatches the session and
the turn ends with exactly one final. Nothing is lost, nothing runs twice: a webhook
delivery the producer could not enqueue is sent by the reaper too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reactq.producer import Producer
from reactq.shared.events import FinalEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.conftest import _redis_answers, free_port
from tests.helpers import WorkerPool, lookup_then_answer, scripted_pool, wait_until
from tests.test_webhooks import SECRET, Receiver

pytestmark = pytest.mark.e2e


class Broker:
    """A private redis-server on a fixed port, stopped and started by the test."""

    def __init__(self, workdir: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (Debian: redis-server)")
        self.binary, self.workdir, self.port = binary, workdir, free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        # appendonly: the messages in its queues survive the restart, as on a real broker.
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        self.proc = subprocess.Popen(
            [self.binary, *args, "--appendonly", "yes", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _redis_answers(self.url):
            assert time.monotonic() < deadline, "the broker did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    workdir = tmp_path / "broker"
    workdir.mkdir()
    b = Broker(workdir)
    b.start()
    yield b
    b.stop()


@dataclass
class Outage:
    """A worker and a producer on the private broker, which is down."""

    broker: Broker
    workers: WorkerPool
    producer: Producer
    receiver: Receiver


@pytest.fixture
async def outage(
    redis_url: str, namespace: str, tmp_path: Path, broker: Broker
) -> AsyncIterator[Outage]:
    receiver = Receiver().start()
    try:
        with scripted_pool(
            redis_url,
            f"{namespace}-broker-down",
            tmp_path,
            ScriptedServer(lookup_then_answer),
            REACTQ_BROKER_URL=broker.url,
            # The dispatch deadline a submit sets is the lease TTL away: a short one,
            # so the reaper dispatches the turn within seconds of the broker's return.
            REACTQ_LEASE_TTL_SECONDS="2",
            REACTQ_REAPER_INTERVAL_SECONDS="0.3",
            REACTQ_WEBHOOK_SECRET=SECRET,
            REACTQ_WEBHOOK_ALLOW_HOSTS="127.0.0.1:*",
            REACTQ_WEBHOOK_TIMEOUT_SECONDS="2",
        ) as (env, workers):
            async with Producer(Settings.from_env(env)) as producer:
                # The producer's broker connection is up, then the broker goes away.
                warm = await producer.submit(f"bd-{uuid.uuid4().hex[:8]}", "warm", agent="e2e")
                await warm.result(timeout=30)
                broker.stop()
                yield Outage(broker, workers, producer, receiver)
    finally:
        receiver.stop()


async def test_submit_while_broker_down_runs_once_broker_is_back(
    outage: Outage, caplog: pytest.LogCaptureFixture
) -> None:
    producer = outage.producer
    sid = f"bd-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="reactq.producer"):
        handle = await producer.submit(sid, "while the broker is down", agent="e2e")
    took = time.monotonic() - started
    assert took < 15, f"submit took {took:.1f}s with the broker down"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("broker is unreachable" in w for w in warnings), warnings
    info = await producer.turn_info(handle.turn_id)
    assert info is not None and info.status == "queued"

    outage.broker.start()
    final = await handle.result(timeout=60)
    assert final.status == "completed", outage.workers.logs()[-3000:]
    await asyncio.sleep(2)  # a second run, if any, would have ended by now
    events = await producer.bus.read(sid, after="0")
    finals = [e for e in events if isinstance(e, FinalEvent)]
    assert [f.turn_id for f in finals] == [handle.turn_id], "exactly one final"
    assert [e.type for e in events].count("started") == 1


async def test_webhook_of_turn_ended_while_broker_down_is_delivered(outage: Outage) -> None:
    """A turn cancelled while queued ends on the producer, which cannot send its webhook
    delivery then: a worker's reaper sends it once the broker is back."""
    producer, receiver = outage.producer, outage.receiver
    sid = f"bd-{uuid.uuid4().hex[:8]}"
    handle = await producer.submit(sid, "never runs", agent="e2e", webhook=receiver.url())
    await producer.cancel(handle.turn_id)
    final = await handle.result(timeout=10)
    assert final.status == "cancelled"

    outage.broker.start()

    async def delivered() -> bool:
        info = await producer.turn_info(handle.turn_id)
        return bool(info and info.webhook and info.webhook.state == "delivered")

    await wait_until(delivered, 30, f"the delivery\n{outage.workers.logs()[-3000:]}")
    [got] = receiver.of(handle.turn_id)
    assert got.valid and got.headers["reactq-delivery"] == handle.turn_id
    assert json.loads(got.body)["status"] == "cancelled"
    events = await producer.bus.read(sid, after="0")
    assert [e.turn_id for e in events if isinstance(e, FinalEvent)] == [handle.turn_id]
