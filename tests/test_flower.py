"""``reactq flower`` next to a real worker: the worker and a finished drain task
read back through Flower's HTTP API, behind basic auth."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis as redis_sync

from reactq.producer import Producer
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.conftest import free_port
from tests.helpers import WorkerPool, lookup_then_answer
from tests.obs_support import http_get, http_json, start_reactq, stop, wait_http

pytestmark = pytest.mark.e2e

pytest.importorskip("flower", reason="pip install 'reactq[flower]'")

AUTH = ("ops", "flower-secret-pw")


@pytest.fixture
def pool(
    redis_url: str, namespace: str, tmp_path: Path
) -> Iterator[tuple[dict[str, str], WorkerPool]]:
    model = ScriptedServer(lookup_then_answer).start_in_thread()
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-flower",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
    }
    workers = WorkerPool(env, tmp_path, concurrency=4)
    workers.start(1)
    try:
        workers.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 1)
        yield env, workers
    finally:
        workers.stop()
        model.stop()


def _worker_name(redis_url: str, namespace: str) -> str:
    client = redis_sync.Redis.from_url(redis_url, decode_responses=True)
    try:
        names = list(client.hkeys(f"{namespace}:workers"))
    finally:
        client.close()
    assert len(names) == 1, names
    return str(names[0])


@pytest.fixture
def neighbour(
    pool: tuple[dict[str, str], WorkerPool], redis_url: str, tmp_path: Path
) -> Iterator[str]:
    """A worker of another namespace on the same Redis; yields its name."""
    env = {**pool[0], "REACTQ_NAMESPACE": pool[0]["REACTQ_NAMESPACE"] + "-other"}
    folder = tmp_path / "other"
    folder.mkdir()
    workers = WorkerPool(env, folder, concurrency=2)
    workers.start(1)
    try:
        workers.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 1)
        yield _worker_name(redis_url, env["REACTQ_NAMESPACE"])
    finally:
        workers.stop()


async def test_flower_shows_the_worker_and_its_finished_drain_task(
    pool: tuple[dict[str, str], WorkerPool], neighbour: str, redis_url: str, tmp_path: Path
) -> None:
    env, _ = pool
    name = _worker_name(redis_url, env["REACTQ_NAMESPACE"])
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    flower_env = {**os.environ, **env, "REACTQ_FLOWER_AUTH": f"{AUTH[0]}:{AUTH[1]}"}
    proc = start_reactq(["flower", "--port", str(port)], flower_env, tmp_path / "flower.log")
    try:
        await asyncio.to_thread(wait_http, f"{base}/healthcheck", 60, proc)
        # Basic auth is on: the API refuses a caller without it.
        status, _ = await asyncio.to_thread(http_get, f"{base}/api/workers")
        assert status == 401

        async def worker_listed() -> bool:
            workers = await asyncio.to_thread(
                http_json, f"{base}/api/workers?refresh=1", auth=AUTH, timeout=10
            )
            return bool(workers) and name in workers

        deadline = time.monotonic() + 60
        while not await worker_listed():
            assert time.monotonic() < deadline, "Flower never listed the worker"
            await asyncio.sleep(0.2)
        # Only this namespace's workers (issue 21, item 11): the other namespace's worker
        # is up, answers its own namespace's broadcasts and sends its heartbeats (every
        # 2 s) to its own event exchange, none of which reaches this Flower.
        await asyncio.sleep(2.5)
        workers = await asyncio.to_thread(
            http_json, f"{base}/api/workers?refresh=1", auth=AUTH, timeout=10
        )
        assert name in workers and neighbour not in workers, sorted(workers)
        listed = await asyncio.to_thread(http_json, f"{base}/dashboard?json=1", auth=AUTH)
        names = [w.get("hostname") for w in (listed or {}).get("data", [])]
        assert neighbour not in names, names

        # Flower learns of tasks from live events: submit until one is seen finished
        # (the first may run before Flower's event receiver is connected).
        async with Producer(Settings.from_env(env)) as producer:
            found: dict[str, object] | None = None
            deadline = time.monotonic() + 60
            while found is None:
                assert time.monotonic() < deadline, "Flower never showed a finished drain"
                sid = f"flower-{uuid.uuid4().hex[:8]}"
                handle = await producer.submit(sid, "hello flower", agent="e2e")
                assert (await handle.result(timeout=30)).status == "completed"
                for _ in range(40):
                    tasks = await asyncio.to_thread(
                        http_json, f"{base}/api/tasks?taskname=reactq.drain", auth=AUTH
                    )
                    found = next(
                        (
                            t
                            for t in (tasks or {}).values()
                            if t.get("args") and sid in t["args"] and t.get("state") == "SUCCESS"
                        ),
                        None,
                    )
                    if found is not None:
                        break
                    await asyncio.sleep(0.1)
        assert found["worker"] == name
        assert isinstance(found["runtime"], float) and found["runtime"] > 0
    finally:
        stop(proc)
    log = (tmp_path / "flower.log").read_text(errors="replace")
    assert AUTH[1] not in log, "the Flower password reached the log"
