"""Issue 20, item 6: the memory tools on a real `reactq worker` process and the
scripted model. A fact saved in one session is recalled in another session of the same
user (the namespace comes from the turn's metadata), not in another user's; the
application finds it through ``Producer.store`` and ``SyncProducer.store``."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from reactq import Producer, SyncProducer
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.helpers import scripted_pool
from tests.memory_agents import memory_script

pytestmark = pytest.mark.e2e


async def _say(producer: Producer, session: str, message: str, **metadata: str) -> str:
    handle = await producer.submit(session, message, agent="assistant", metadata=metadata)
    final = await handle.result(timeout=30)
    assert final.status == "completed", final
    return final.text


async def test_a_fact_saved_in_one_session_is_recalled_in_another(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    user, other = f"u-{uuid.uuid4().hex[:8]}", f"u-{uuid.uuid4().hex[:8]}"
    with scripted_pool(
        redis_url,
        f"{namespace}-memory",
        tmp_path,
        ScriptedServer(memory_script),
        workers=1,
        agents="tests.memory_agents:agent",
        concurrency=4,
    ) as (env, _):
        async with Producer(Settings.from_env(env)) as producer:
            saved = await asyncio.wait_for(
                _say(producer, "chat-a", "remember: I am allergic to peanuts", user_id=user), 60
            )
            assert saved.startswith("Remembered as m-")
            key = saved.removeprefix("Remembered as ").rstrip(".")

            recalled = await _say(producer, "chat-b", "recall: peanut", user_id=user)
            assert recalled == f"{key}: I am allergic to peanuts"
            assert await _say(producer, "chat-c", "recall: peanut", user_id=other) == (
                "Nothing remembered matches 'peanut'."
            )
            # A turn with no user id: the tool fails, the model reads why, the turn goes on.
            unknown = await _say(producer, "chat-d", "recall: peanut")
            assert unknown.startswith("[memory_error] no memory namespace for this turn")

            document = await producer.store.get(("users", user), key)
            assert document is not None
            assert document.value["text"] == "I am allergic to peanuts"
            assert document.value["session_id"] == "chat-a"
            found = await producer.store.search(f"users.{user}", query="PEANUTS")
            assert [d.key for d in found.documents] == [key]
            assert (await producer.state_store()).__class__.__name__ == "SqlStateStore"

        def from_sync_code() -> list[str]:
            with SyncProducer(Settings.from_env(env)) as sync:
                sync.store.put(("users", user), "diet", {"text": "vegetarian"})
                assert sync.store.get(("users", user), "diet") is not None
                keys = [d.key for d in sync.store.search(("users", user)).documents]
                assert sync.store.delete(("users", user), "diet") is True
                return keys

        assert sorted(await asyncio.to_thread(from_sync_code)) == sorted(["diet", key])
