"""Issue 20, item 6: the memory tools on a real `reactq worker` process and the
scripted model. A fact saved in one session is recalled in another session of the same
user (the namespace comes from the turn's metadata), not in another user's; the
application finds it through ``Producer.store`` and ``SyncProducer.store``."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
import pytest

from reactq import Producer, SyncProducer
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.gateway_support import start_gateway
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


# Issue 29, item 1: over HTTP, through real workers, two tenants' keys. Every turn the
# gateway submits carries its key's identity, and the memory tools keep a tenant's
# namespaces under its prefix, whatever the turn's metadata says.
TENANT_KEYS = "acme:acme-key;prefix=acme-,beta:beta-key;prefix=beta-"


def _say_http(
    client: httpx2.Client, session: str, message: str, agent: str = "assistant", **metadata: Any
) -> str:
    body = {"message": message, "agent": agent, "metadata": metadata}
    accepted = client.post(f"/v1/sessions/{session}/turns", json=body)
    assert accepted.status_code == 202, accepted.text
    turn_id = accepted.json()["turn_id"]
    deadline = time.monotonic() + 30
    while True:
        info = client.get(f"/v1/turns/{turn_id}").json()
        if info["status"] not in ("queued", "running"):
            break
        assert time.monotonic() < deadline, f"turn {turn_id} did not end"
        time.sleep(0.05)
    assert info["status"] == "completed", info
    text: str = info["final_text"]
    return text


def test_one_tenant_cannot_read_or_overwrite_another_tenants_memories(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:8]
    user = f"alice{tag}"
    with scripted_pool(
        redis_url,
        f"{namespace}-tenants",
        tmp_path,
        ScriptedServer(memory_script),
        workers=1,
        agents="tests.memory_agents:agents",
        concurrency=4,
    ) as (env, _):
        gateway_env = {**env, "REACTQ_API_KEYS": TENANT_KEYS}
        with (
            start_gateway(gateway_env, tmp_path, "acme-key") as gateway,
            gateway.client("acme-key") as acme,
            gateway.client("beta-key") as beta,
        ):
            pin = "alice's card PIN is 4321"
            saved = _say_http(acme, f"acme-{tag}-1", f"remember[pin]: {pin}", user_id=user)
            assert saved == "Remembered as pin."
            assert _say_http(acme, f"acme-{tag}-2", "recall: PIN", user_id=user) == f"pin: {pin}"

            # beta's turn names the same user: it finds nothing, and its write lands in
            # beta's own namespace.
            assert _say_http(beta, f"beta-{tag}-1", "recall: PIN", user_id=user) == (
                "Nothing remembered matches 'PIN'."
            )
            _say_http(beta, f"beta-{tag}-2", "remember[pin]: beta was here", user_id=user)
            assert _say_http(acme, f"acme-{tag}-3", "recall: PIN", user_id=user) == f"pin: {pin}"
            assert _say_http(beta, f"beta-{tag}-3", "recall: PIN", user_id=user) == (
                "pin: beta was here"
            )

            # The store route and the tools agree on where a tenant's memories are.
            mine = acme.get(f"/v1/store/acme-users.{user}/pin")
            assert mine.status_code == 200, mine.text
            assert mine.json()["value"]["text"] == pin
            assert beta.get(f"/v1/store/acme-users.{user}/pin").status_code == 404
            assert beta.get(f"/v1/store/beta-users.{user}/pin").json()["value"]["text"] == (
                "beta was here"
            )

            # A client cannot claim an identity: the body has no such field, and
            # metadata is only metadata.
            forged = beta.post(
                f"/v1/sessions/beta-{tag}-4/turns",
                json={
                    "message": "recall: PIN",
                    "agent": "assistant",
                    "tenant": {"name": "acme", "prefix": "acme-"},
                },
            )
            assert forged.status_code == 422, forged.text
            assert (
                _say_http(
                    beta,
                    f"beta-{tag}-5",
                    "recall: PIN",
                    user_id=user,
                    tenant={"name": "acme", "prefix": "acme-"},
                )
                == "pin: beta was here"
            )
