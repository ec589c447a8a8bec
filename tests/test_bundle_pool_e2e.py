"""The file tools on real `reactq worker` processes sharing one workspace root: turn 1
of a session edits a file on one worker; that worker stops, and turn 2 of the same
session, on the other worker, reads the edit back."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from reactq.producer import Producer
from reactq.shared.events import Event, StartedEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.bundle_agents import NOTES, files_script
from tests.helpers import WorkerPool, worker_pid

pytestmark = pytest.mark.e2e


async def _run(producer: Producer, session: str, message: str) -> tuple[str, str]:
    """Send a turn; (its final text, the worker that ran it)."""
    handle = await producer.submit(session, message, agent="files")
    events: list[Event] = []
    async for event in handle.events():
        events.append(event)
    final = await handle.result(timeout=30)
    assert final.status == "completed", final
    (started,) = [e for e in events if isinstance(e, StartedEvent)]
    return final.text, started.worker


async def test_a_session_edits_on_one_worker_and_reads_on_another(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    root = tmp_path / "workspaces"
    server = ScriptedServer(files_script).start_in_thread()
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-files",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        "REACTQ_WORKSPACE_ROOT": str(root),
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
    }
    pool = WorkerPool(env, tmp_path, agents="tests.bundle_agents:agent", concurrency=4)
    try:
        pool.start(2)
        await asyncio.to_thread(pool.wait_ready, redis_url, env["REACTQ_NAMESPACE"], 2)
        session = f"files-{uuid.uuid4().hex[:8]}"
        async with Producer(Settings.from_env(env)) as producer:
            text, first = await asyncio.wait_for(_run(producer, session, "write notes"), 60)
            assert "Edited notes/today.md" in text and "+hello from turn 1, edited" in text
            assert (root / session / NOTES).read_text() == "hello from turn 1, edited\n"

            # The worker that ran turn 1 leaves; turn 2 can only run on the other one.
            (gone,) = [p for p in pool.procs if p.pid == worker_pid(first)]
            gone.terminate()
            await asyncio.to_thread(gone.wait, 30)

            text, second = await asyncio.wait_for(_run(producer, session, "read notes"), 60)
        assert second != first
        read, found = text.split(" | ")
        assert read == "     1\thello from turn 1, edited"
        assert found.startswith(f"{NOTES}:1: hello from turn 1, edited")
    finally:
        pool.stop()
        server.stop()
