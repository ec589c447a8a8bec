"""A webhook delivery whose worker is SIGKILLed mid-POST, on real parts: the receiver
holds the first request, the worker sending it is killed, another one starts.

The delivery is not lost: another worker's reaper sends it again (the next attempt,
the same ``Reactq-Delivery`` id) once the killed attempt's deadline passed, and the
turn's webhook status shows both attempts, the first with no outcome.
"""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reactq.producer import Producer
from reactq.shared.settings import Settings
from reactq.shared.webhooks import WebhookAttempt
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.helpers import WorkerPool, lookup_then_answer, scripted_pool, wait_until
from tests.test_webhooks import SECRET, Receiver

pytestmark = pytest.mark.e2e


@dataclass
class Pool:
    """One real worker, its environment, a producer and a receiver."""

    env: dict[str, str]
    workers: WorkerPool
    producer: Producer
    receiver: Receiver

    def replace_worker(self) -> None:
        """SIGKILL the worker and start another."""
        [killed] = [p for p in self.workers.procs if p.poll() is None]
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(10)
        self.workers.start(1)

    async def attempts(self, turn_id: str) -> list[WebhookAttempt]:
        info = await self.producer.turn_info(turn_id)
        return [] if info is None or info.webhook is None else info.webhook.attempts

    async def delivered(self, turn_id: str) -> bool:
        info = await self.producer.turn_info(turn_id)
        return bool(info and info.webhook and info.webhook.state == "delivered")


@pytest.fixture
async def hooked(redis_url: str, namespace: str, tmp_path: Path) -> AsyncIterator[Pool]:
    hold = threading.Event()
    receiver = Receiver(hold=hold).start()
    try:
        with scripted_pool(
            redis_url,
            f"{namespace}-wh-lost",
            tmp_path,
            ScriptedServer(lookup_then_answer),
            REACTQ_WEBHOOK_SECRET=SECRET,
            REACTQ_WEBHOOK_ALLOW_HOSTS="127.0.0.1:*",
            REACTQ_WEBHOOK_BACKOFF_SECONDS="2",
            # A delivery must show progress within the POST timeout plus the lease TTL:
            # small ones here, so a lost attempt is sent again within seconds.
            REACTQ_WEBHOOK_TIMEOUT_SECONDS="1",
            REACTQ_LEASE_TTL_SECONDS="1.5",
            REACTQ_REAPER_INTERVAL_SECONDS="0.3",
        ) as (env, workers):
            async with Producer(Settings.from_env(env)) as producer:
                yield Pool(env, workers, producer, receiver)
    finally:
        hold.set()
        receiver.stop()


async def test_webhook_redelivered_after_worker_killed_mid_post(hooked: Pool) -> None:
    receiver = hooked.receiver
    sid = f"whl-{uuid.uuid4().hex[:8]}"
    handle = await hooked.producer.submit(sid, "hi", agent="e2e", webhook=receiver.url())
    await handle.result(timeout=30)
    await wait_until(lambda: receiver.got, 15, "the first POST")  # held unanswered
    first = await hooked.attempts(handle.turn_id)
    assert [(a.attempt, a.ok, a.next_attempt_at is not None) for a in first] == [(1, False, True)]
    hooked.replace_worker()

    logs = hooked.workers.logs
    await wait_until(lambda: hooked.delivered(handle.turn_id), 30, f"the redelivery\n{logs()}")
    got = receiver.of(handle.turn_id)
    assert [d.headers["reactq-attempt"] for d in got] == ["1", "2"]
    assert {d.headers["reactq-delivery"] for d in got} == {handle.turn_id}
    assert all(d.valid for d in got)
    assert got[0].body == got[1].body
    attempts = await hooked.attempts(handle.turn_id)
    assert [a.attempt for a in attempts] == [1, 2]
    assert [a.ok for a in attempts] == [False, True]
    assert attempts[0].status_code is None
    assert attempts[0].error is not None and "worker sending it stopped" in attempts[0].error
    assert attempts[1].status_code == 200


async def test_webhook_retry_redelivered_after_worker_killed_during_backoff(
    hooked: Pool,
) -> None:
    """The retry's countdown message is held by the worker that sent it: killed during
    the backoff, the retry still comes (from another worker's reaper)."""
    receiver = hooked.receiver
    receiver.failures, receiver.hold = 1, None
    sid = f"whl-{uuid.uuid4().hex[:8]}"
    handle = await hooked.producer.submit(sid, "hi", agent="e2e", webhook=receiver.url())
    await handle.result(timeout=30)

    async def retry_scheduled() -> bool:
        attempts = await hooked.attempts(handle.turn_id)
        return bool(attempts) and attempts[0].status_code == 500

    await wait_until(retry_scheduled, 15, "the first attempt's 500")
    hooked.replace_worker()  # within the 2 s backoff

    logs = hooked.workers.logs
    await wait_until(lambda: hooked.delivered(handle.turn_id), 30, f"the retry\n{logs()}")
    got = receiver.of(handle.turn_id)
    assert [d.headers["reactq-attempt"] for d in got] == ["1", "2"]
    attempts = await hooked.attempts(handle.turn_id)
    assert [(a.attempt, a.status_code) for a in attempts] == [(1, 500), (2, 200)]
