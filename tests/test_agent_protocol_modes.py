"""Issue 31: the Agent Protocol's graph stream modes (``events``, ``tasks``,
``checkpoints``, ``debug``) and ``custom``, read with the real ``langgraph-sdk``; and
the JavaScript SDK's whole scenario (``tests/js/agent_protocol_scenario.mjs``) against
the same pool."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway_support import Gateway, gateway_over_pool
from tests.helpers import ROOT
from tests.js_support import run_script
from tests.test_agent_protocol_runs import AGENT, KEY, KEYS, client, human, model, types

pytestmark = pytest.mark.e2e

GRAPH = ["events", "tasks", "checkpoints", "debug", "custom"]


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("ap-modes")
    with gateway_over_pool(redis_url, f"{namespace}-apm", tmp, model, KEYS, KEY) as gw:
        yield gw


def of(parts: list[Any], event: str) -> list[Any]:
    return [p.data for p in parts if p.event == event]


def test_the_graph_modes_follow_the_loop(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway) as lg:
            tid = (await lg.threads.create())["thread_id"]
            parts = [
                p
                async for p in lg.runs.stream(tid, AGENT, input=human("weather"), stream_mode=GRAPH)
            ]
            assert parts[-1].event == "end"
            run_id = of(parts, "events")[0]["run_id"]
            state = await lg.threads.get_state(tid)
            check(parts, run_id, state)

            # Resumed after any of its messages, the stream goes on exactly as it was.
            middle = parts[len(parts) // 2]
            assert middle.id
            rest = [
                p
                async for p in lg.runs.join_stream(
                    tid, run_id, stream_mode=GRAPH, last_event_id=middle.id
                )
            ]
            tail = parts[parts.index(middle) + 1 :]
            assert [(p.event, p.data) for p in rest] == [(p.event, p.data) for p in tail]

    asyncio.run(scenario())


def check(parts: list[Any], run_id: str, state: dict[str, Any]) -> None:
    events = of(parts, "events")
    kinds = [e["event"] for e in events]
    assert kinds[0] == "on_chain_start" and kinds[-1] == "on_chain_end", kinds
    assert kinds.count("on_chat_model_start") == kinds.count("on_chat_model_end") == 2
    assert kinds.index("on_chat_model_end") < kinds.index("on_tool_start")
    assert kinds.index("on_tool_start") < kinds.index("on_tool_end")
    # (No ``on_chat_model_stream``: this agent's model does not stream.)
    start = next(e for e in events if e["event"] == "on_tool_start")
    assert start["name"] == "lookup" and start["data"]["input"] == {"key": "weather"}
    assert start["metadata"]["langgraph_node"] == "tools" and start["parent_ids"] == [run_id]
    end = next(e for e in events if e["event"] == "on_tool_end")
    assert end["run_id"] == start["run_id"] and end["data"]["output"]["type"] == "tool"
    assert types(events[-1]["data"]["output"]) == ["human", "ai", "tool", "ai"]

    tasks = of(parts, "tasks")
    begun = [t["name"] for t in tasks if "input" in t]
    done = [t for t in tasks if "result" in t]
    assert begun == ["agent", "tools", "agent"]
    assert [t["name"] for t in done] == begun and all(t["error"] is None for t in done)
    assert [t["id"] for t in done] == [t["id"] for t in tasks if "input" in t]
    ai = done[0]["result"][0][1][0]
    assert ai["type"] == "ai" and ai["tool_calls"][0]["name"] == "lookup"

    checkpoints = of(parts, "checkpoints")
    assert [c["next"] for c in checkpoints] == [["agent"], ["tools"], ["agent"], []]
    assert checkpoints[0]["metadata"]["source"] == "input"
    assert checkpoints[0]["parent_config"] is None
    for parent, child in itertools.pairwise(checkpoints):
        assert child["parent_config"] == parent["config"]
    last = checkpoints[-1]
    assert last["config"]["configurable"]["checkpoint_id"] == run_id
    assert last["config"]["configurable"]["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
    assert last["values"] == state["values"]

    debug = of(parts, "debug")
    assert {d["type"] for d in debug} == {"task", "task_result", "checkpoint"}
    assert [d["payload"] for d in debug if d["type"] == "checkpoint"] == checkpoints
    assert all(d["timestamp"].endswith("+00:00") for d in debug)

    custom = of(parts, "custom")
    assert [c["model"] for c in custom if c["type"] == "usage"], custom
    assert all("session_id" not in c for c in custom)


def test_an_interrupt_in_the_graph_modes(gateway: Gateway, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client(gateway) as lg:
            tid = (await lg.threads.create())["thread_id"]
            paying = f"pay {tmp_path / 'paid.txt'}"
            parts = [
                p
                async for p in lg.runs.stream(
                    tid, "durable", input=human(paying), stream_mode=["tasks", "checkpoints"]
                )
            ]
            tools = of(parts, "tasks")[-1]
            assert tools["name"] == "tools" and tools["result"] == []
            assert tools["interrupts"][0]["value"]["action_requests"][0]["tool"] == "pay"
            last = of(parts, "checkpoints")[-1]
            assert last["next"] == ["tools"]
            assert last["tasks"][0]["interrupts"] == tools["interrupts"]
            state = await lg.threads.get_state(tid)
            assert state["next"] == ["tools"] and state["interrupts"] == tools["interrupts"]
            await lg.runs.wait(tid, "durable", command={"resume": False})

    asyncio.run(scenario())


def test_the_javascript_sdk_scenario(gateway: Gateway) -> None:
    seen = run_script(
        "agent_protocol_scenario.mjs",
        gateway.url,
        KEY,
        AGENT,
        packages=("@langchain/langgraph-sdk",),
    )
    assert seen["streamed"] == seen["state"] == ["human", "ai", "tool", "ai"]
    assert seen["tokens"] > 0
    assert seen["resumed"] == seen["whole"]
    assert seen["history"] == 1
    assert seen["rejected"] == 409
    assert seen["enqueued"] == ["human", "ai", "tool", "ai"] * 3
    assert seen["interrupted"] == "interrupted"
    assert seen["cancelled"] == "interrupted"
    assert seen["found"] == 1
    assert seen["item"] == {"colour": "blue"}
    assert seen["cron"] is True
    assert seen["crons_after_delete"] == 0


def test_the_example_script_runs_unchanged(gateway: Gateway) -> None:
    script = str(ROOT / "examples" / "langgraph_client.py")
    ran = subprocess.run(
        [
            sys.executable,
            script,
            "weather",
            "--url",
            gateway.url,
            "--key",
            KEY,
            "--assistant",
            AGENT,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    report = json.loads(ran.stdout.strip().splitlines()[-1])
    assert report["answer"] == "answer to: weather"
    assert report["note"] == {"text": "answer to: weather"}
    assert "[agent] ai calls ['lookup']" in ran.stdout and "[tools] tool" in ran.stdout


def test_a_copied_thread_goes_its_own_way(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway) as lg:
            tid = (await lg.threads.create(metadata={"who": "original"}))["thread_id"]
            await lg.runs.wait(tid, AGENT, input=human("weather"))
            copy = await lg.threads.copy(tid)
            cid = copy["thread_id"]
            assert cid != tid and copy["metadata"] == {"who": "original"}
            original = await lg.threads.get_state(tid)
            copied = await lg.threads.get_state(cid)
            assert copied["values"] == original["values"]

            await lg.runs.wait(cid, AGENT, input=human("rain"))
            assert (
                types((await lg.threads.get_state(cid))["values"])
                == ["human", "ai", "tool", "ai"] * 2
            )
            assert (await lg.threads.get_state(tid))["values"] == original["values"]

            empty = (await lg.threads.create())["thread_id"]
            assert (await lg.threads.copy(empty))["values"] == {"messages": []}
            with pytest.raises(httpx.HTTPStatusError) as missing:
                await lg.threads.copy(str(uuid.uuid4()))
            assert missing.value.response.status_code == 404

    asyncio.run(scenario())


def test_a_stateless_run_leaves_no_thread_unless_kept(gateway: Gateway) -> None:
    async def gone(lg: Any, thread_id: str) -> bool:
        for _ in range(100):
            try:
                await lg.threads.get(thread_id)
            except httpx.HTTPStatusError as missing:
                return missing.response.status_code == 404
            await asyncio.sleep(0.1)
        return False

    async def scenario() -> None:
        async with client(gateway) as lg:
            before = await lg.threads.count()
            values = await lg.runs.wait(None, AGENT, input=human("gone"))
            assert types(values) == ["human", "ai", "tool", "ai"]
            assert await lg.threads.count() == before

            created: list[Any] = []
            parts = [
                p
                async for p in lg.runs.stream(
                    None, AGENT, input=human("streamed"), on_run_created=created.append
                )
            ]
            assert parts[-1].event == "end" and await gone(lg, created[0]["thread_id"])

            run = await lg.runs.create(None, AGENT, input=human("background"))
            assert await gone(lg, run["thread_id"])

            kept = await lg.runs.create(None, AGENT, input=human("kept"), on_completion="keep")
            await lg.runs.join(kept["thread_id"], kept["run_id"])
            state = await lg.threads.get_state(kept["thread_id"])
            assert types(state["values"]) == ["human", "ai", "tool", "ai"]
            assert await lg.threads.count() == before + 1

    asyncio.run(scenario())


def test_deleted_and_rolled_back_runs_are_gone(gateway: Gateway) -> None:
    async def status(call: Any) -> int:
        try:
            await call
        except httpx.HTTPStatusError as refused:
            return refused.response.status_code
        return 200

    async def scenario() -> None:
        async with client(gateway) as lg:
            tid = (await lg.threads.create())["thread_id"]
            done = await lg.runs.create(tid, AGENT, input=human("weather"))
            await lg.runs.join(tid, done["run_id"])
            before = await lg.threads.get_state(tid)

            slow = await lg.runs.create(tid, AGENT, input=human("sleep=1 slow"))
            assert await status(lg.runs.delete(tid, slow["run_id"])) == 409
            await lg.runs.cancel(tid, slow["run_id"], action="rollback")
            assert await status(lg.runs.get(tid, slow["run_id"])) == 404
            assert (await lg.threads.get_state(tid))["values"] == before["values"]

            # A rollback run replaces the one going on: that one is deleted.
            old = await lg.runs.create(tid, AGENT, input=human("sleep=1 old"))
            new = await lg.runs.create(
                tid, AGENT, input=human("new"), multitask_strategy="rollback"
            )
            await lg.runs.join(tid, new["run_id"])
            assert await status(lg.runs.get(tid, old["run_id"])) == 404
            values = (await lg.threads.get_state(tid))["values"]
            assert [m["content"] for m in values["messages"] if m["type"] == "human"] == [
                "weather",
                "new",
            ]

            await lg.runs.delete(tid, done["run_id"])
            assert await status(lg.runs.get(tid, done["run_id"])) == 404
            assert await status(lg.runs.join(tid, done["run_id"])) == 404
            assert [r["run_id"] for r in await lg.runs.list(tid)] == [new["run_id"]]
            assert await status(lg.runs.delete(tid, done["run_id"])) == 404
            # Its messages stay: a run deleted is not a rollback.
            assert (await lg.threads.get_state(tid))["values"]["messages"][:4] == before["values"][
                "messages"
            ]

    asyncio.run(scenario())
