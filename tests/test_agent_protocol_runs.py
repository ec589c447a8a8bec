"""Issue 31: the Agent Protocol's threads and runs driven by the real ``langgraph-sdk``
client (async and sync) against a real pool: `reactq serve`, a real worker, the
scripted model (``lookup`` then an answer; ``sleep=S`` in a message: S seconds a step)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client, get_sync_client

from reactq.worker.agent.llm.replies import Reply
from tests.gateway_support import Gateway, SSEReader, start_gateway
from tests.helpers import last_user_text, running_pool, sleepy_lookup
from tests.js_support import run_script

pytestmark = pytest.mark.e2e

KEY = "ap-runs-key"
TENANT = "ap-tenant-key"
KEYS = f"{KEY},acme:{TENANT};prefix=acme-;agents=other"
AGENT = "e2e"


def model(request: Mapping[str, Any]) -> Reply:
    """``sleepy_lookup``; a message with "fail" in it gets a 400 from the model, and
    ``pay PATH`` calls ``pay`` (which waits for approval), then answers "paid"."""
    text = last_user_text(request)
    if "fail" in text:
        return Reply.error(400, "the scripted model refuses")
    if text.startswith("pay "):
        if request["messages"][-1]["role"] == "user":
            return Reply.tool_calls([("pay", {"path": text.split()[1], "amount": 5})])
        return Reply.text("paid")
    return sleepy_lookup(request)


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("ap-runs")
    with running_pool(
        redis_url, f"{namespace}-ap", tmp, model, agents="tests.pool_agents:agents"
    ) as env:
        gw = start_gateway(
            {**env, "REACTQ_API_KEYS": KEYS, "REACTQ_SSE_HEARTBEAT_SECONDS": "0.2"}, Path(tmp), KEY
        )
        try:
            yield gw
        finally:
            gw.stop()


def client(gateway: Gateway, key: str = KEY) -> Any:
    return get_client(url=gateway.url, api_key=None, headers={"Authorization": f"Bearer {key}"})


def human(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def types(values: dict[str, Any]) -> list[str]:
    return [m["type"] for m in values["messages"]]


def test_stream_values_and_messages_then_state(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway) as lg:
            await steps(lg)

    async def steps(lg: Any) -> None:
        tag = uuid.uuid4().hex[:8]
        thread = await lg.threads.create(metadata={"tag": tag})
        tid = thread["thread_id"]
        assert thread["status"] == "idle" and thread["metadata"] == {"tag": tag}
        assert (await lg.threads.get(tid))["thread_id"] == tid
        created: list[Any] = []
        parts = [
            p
            async for p in lg.runs.stream(
                tid,
                AGENT,
                input=human("weather"),
                stream_mode=["values", "messages-tuple", "updates", "metadata"],
                on_run_created=created.append,
            )
        ]
        assert [c["run_id"] for c in created] == [parts[0].data["run_id"]]
        events = [p.event for p in parts]

        assert events[0] == "metadata" and "run_id" in parts[0].data
        assert "messages" in events and "updates" in events and events[-1] == "end"
        final = [p.data for p in parts if p.event == "values"][-1]
        assert types(final) == ["human", "ai", "tool", "ai"]
        ai, tool, answer = final["messages"][1:]
        assert ai["tool_calls"][0]["name"] == "lookup"
        assert ai["tool_calls"][0]["args"] == {"key": "weather"}
        assert tool["tool_call_id"] == ai["tool_calls"][0]["id"]
        assert answer["content"] == "answer to: weather"
        chunk, meta = next(p.data for p in parts if p.event == "messages")
        assert chunk["type"] in ("ai", "AIMessageChunk") and meta["run_id"] == created[0]["run_id"]
        updates = [p.data for p in parts if p.event == "updates"]
        assert [next(iter(u)) for u in updates] == ["agent", "tools", "agent"]

        state = await lg.threads.get_state(tid)
        assert types(state["values"]) == ["human", "ai", "tool", "ai"]
        assert [m["id"] for m in state["values"]["messages"]] == [
            m["id"] for m in final["messages"]
        ]
        assert (await lg.threads.get(tid))["status"] == "idle"

        found = await lg.threads.search(metadata={"tag": tag})
        assert [t["thread_id"] for t in found] == [tid]
        await lg.threads.update(tid, metadata={"more": 1})
        assert (await lg.threads.get(tid))["metadata"] == {"tag": tag, "more": 1}

        runs = await lg.runs.list(tid)
        assert len(runs) == 1 and runs[0]["status"] == "success"
        assert (await lg.runs.get(tid, runs[0]["run_id"]))["assistant_id"] == AGENT

        await lg.threads.delete(tid)
        with pytest.raises(httpx.HTTPStatusError) as missing:
            await lg.threads.get(tid)
        assert missing.value.response.status_code == 404

    asyncio.run(scenario())


def test_wait_join_and_sync_client(gateway: Gateway) -> None:
    with get_sync_client(
        url=gateway.url, api_key=None, headers={"Authorization": f"Bearer {KEY}"}
    ) as lg:
        sync_steps(lg)


def sync_steps(lg: Any) -> None:
    thread = lg.threads.create()
    tid = thread["thread_id"]
    values = lg.runs.wait(tid, AGENT, input=human("first"))
    assert isinstance(values, dict)
    assert types(values) == ["human", "ai", "tool", "ai"]
    run = lg.runs.create(tid, AGENT, input=human("second"), multitask_strategy="enqueue")
    assert run["status"] == "pending" and run["thread_id"] == tid
    joined = lg.runs.join(tid, run["run_id"])
    assert types(joined) == ["human", "ai", "tool", "ai"] * 2
    assert lg.runs.get(tid, run["run_id"])["status"] == "success"
    history = lg.threads.get_history(tid)
    assert [types(h["values"]) for h in history] == [types(joined), types(values)]
    assert history[0]["checkpoint"]["checkpoint_id"] == run["run_id"]
    assert history[0]["parent_checkpoint"] == history[1]["checkpoint"]
    older = lg.threads.get_history(tid, before=history[0]["checkpoint"])
    assert [h["checkpoint"] for h in older] == [history[1]["checkpoint"]]
    with pytest.raises(httpx.HTTPStatusError) as unknown:
        lg.runs.wait(str(uuid.uuid4()), AGENT, input=human("x"))
    assert unknown.value.response.status_code == 404
    with pytest.raises(httpx.HTTPStatusError) as bad:
        lg.runs.wait(tid, AGENT, input={"nope": 1})
    assert bad.value.response.status_code == 422


def test_reject_cancel_and_resume_a_stream(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway) as lg:
            await steps(lg)

    async def steps(lg: Any) -> None:
        tid = (await lg.threads.create())["thread_id"]
        run = await lg.runs.create(tid, AGENT, input=human("sleep=0.5 one"))
        with pytest.raises(httpx.HTTPStatusError) as rejected:
            await lg.runs.create(tid, AGENT, input=human("another"), multitask_strategy="reject")
        assert rejected.value.response.status_code == 409

        # Read the first events, drop the connection, resume after the last id seen.
        first: list[Any] = []
        joined = lg.runs.join_stream(tid, run["run_id"], stream_mode="values")
        async for part in joined:
            first.append(part)
            if len(first) == 2:
                break
        await joined.aclose()
        assert first[-1].id, first
        rest = [
            p
            async for p in lg.runs.join_stream(
                tid, run["run_id"], stream_mode="values", last_event_id=first[-1].id
            )
        ]
        whole = [p async for p in lg.runs.join_stream(tid, run["run_id"], stream_mode="values")]
        got = [(p.event, p.id, len((p.data or {}).get("messages", []))) for p in first + rest]
        want = [(p.event, p.id, len((p.data or {}).get("messages", []))) for p in whole]
        assert got == want
        assert [p.data for p in first + rest] == [p.data for p in whole]
        assert types(whole[-2].data) == ["human", "ai", "tool", "ai"]

        slow = await lg.runs.create(tid, AGENT, input=human("sleep=0.5 two"))
        await asyncio.sleep(0.3)
        await lg.runs.cancel(tid, slow["run_id"], wait=True)
        assert (await lg.runs.get(tid, slow["run_id"]))["status"] == "interrupted"
        assert (await lg.threads.get(tid))["status"] == "idle"

        # ``interrupt``: the running run stops, the new one runs.
        old = await lg.runs.create(tid, AGENT, input=human("sleep=0.5 old"))
        await asyncio.sleep(0.3)
        new = await lg.runs.create(
            tid, AGENT, input=human("sleep=0.1 new"), multitask_strategy="interrupt"
        )
        await lg.runs.join(tid, new["run_id"])
        assert (await lg.runs.get(tid, old["run_id"]))["status"] == "interrupted"
        assert (await lg.runs.get(tid, new["run_id"]))["status"] == "success"
        statuses = [r["status"] for r in await lg.runs.list(tid, limit=2)]
        assert statuses == ["success", "interrupted"]

    asyncio.run(scenario())


def test_thread_ids_statuses_and_bad_input(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway) as lg:
            await steps(lg)

    async def steps(lg: Any) -> None:
        tid = f"ap-{uuid.uuid4().hex[:10]}"
        created = await lg.threads.create(thread_id=tid, metadata={"k": "v"})
        assert created["thread_id"] == tid
        with pytest.raises(httpx.HTTPStatusError) as exists:
            await lg.threads.create(thread_id=tid)
        assert exists.value.response.status_code == 409
        again = await lg.threads.create(thread_id=tid, if_exists="do_nothing")
        assert again["metadata"] == {"k": "v"}
        assert (await lg.threads.get_state(tid))["values"] == {"messages": []}
        await lg.threads.update(tid, metadata={"k2": 2})

        run = await lg.runs.create(tid, AGENT, input=human("sleep=0.5 busy"))
        await asyncio.sleep(0.2)
        assert (await lg.threads.get(tid))["status"] == "busy"
        busy = await lg.threads.search(metadata={"k": "v", "k2": 2}, status="busy")
        assert [t["thread_id"] for t in busy] == [tid]
        await lg.runs.join(tid, run["run_id"])
        assert (await lg.threads.get(tid))["status"] == "idle"
        assert await lg.threads.search(metadata={"k": "v", "k2": 2}, status="busy") == []
        assert (await lg.threads.get(tid))["metadata"] == {"k": "v", "k2": 2}

        for call in [
            lambda: lg.threads.get("no-such-thread-x"),
            lambda: lg.threads.get_state("no-such-thread-x"),
            lambda: lg.runs.get(tid, "t_nope"),
            lambda: lg.runs.join(tid, "t_nope"),
        ]:
            with pytest.raises(httpx.HTTPStatusError) as missing:
                await call()
            assert missing.value.response.status_code == 404

    asyncio.run(scenario())

    with gateway.client() as http:
        for method, path, body in [
            ("POST", "/threads", {"thread_id": "a b"}),
            ("GET", "/threads/a%20b", None),
            ("GET", "/threads/a%20b/state", None),
            ("POST", "/threads/a%20b/runs/wait", {"assistant_id": AGENT, "input": human("x")}),
            ("GET", f"/threads/{'x' * 300}/runs", None),
            ("GET", "/threads/x/runs/t_1/stream", None),
            ("POST", "/threads", {"if_exists": "sometimes"}),
            ("POST", "/threads/search", {"limit": 0}),
            ("POST", "/threads/x/runs", {"input": human("hi")}),
            ("POST", "/threads/x/runs/stream", {"assistant_id": AGENT, "stream_mode": "nope"}),
            ("POST", "/threads/x/runs/wait", {"assistant_id": AGENT, "input": "text"}),
            (
                "POST",
                "/runs/wait",
                {"assistant_id": AGENT, "input": human("x"), "after_seconds": 5},
            ),
        ]:
            answer = http.request(method, path, json=body)
            assert answer.status_code in (404, 422), (path, answer.status_code, answer.text)
        unknown = http.post("/threads", json={}).json()["thread_id"]
        hook = {"assistant_id": AGENT, "input": human("hi"), "webhook": "http://127.0.0.1:9/x"}
        refused = http.post(f"/threads/{unknown}/runs", json=hook)
        assert refused.status_code in (422, 501), refused.text
        # A quiet stream gets keep-alive comments (REACTQ_SSE_HEARTBEAT_SECONDS).
        slow = {"assistant_id": AGENT, "input": human("sleep=0.6 quiet")}
        run_id = http.post(f"/threads/{unknown}/runs", json=slow).json()["run_id"]
        with http.stream("GET", f"/threads/{unknown}/runs/{run_id}/stream") as response:
            reader = SSEReader(response.iter_lines())
            kinds = [m.event for m in reader]
        assert kinds[-1] == "end" and reader.comments, (kinds, reader.comments)
        no_agent = http.post(
            f"/threads/{unknown}/runs/wait", json={"assistant_id": "nobody", "input": human("hi")}
        )
        assert no_agent.status_code == 422, no_agent.text


def test_a_failed_run_streams_an_error(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway) as lg:
            tid = (await lg.threads.create())["thread_id"]
            parts = [p async for p in lg.runs.stream(tid, AGENT, input=human("fail now"))]
            assert [p.event for p in parts][-2:] == ["error", "end"], parts
            assert parts[-2].data["message"]
            assert (await lg.threads.get(tid))["status"] == "error"
            failed = await lg.runs.wait(tid, AGENT, input=human("fail again"), raise_error=False)
            assert "__error__" in failed

    asyncio.run(scenario())


def test_stateless_runs_count_and_a_tenant_key(gateway: Gateway) -> None:
    async def scenario() -> None:
        async with client(gateway) as lg:
            values = await lg.runs.wait(None, AGENT, input=human("no thread"))
            assert types(values) == ["human", "ai", "tool", "ai"]
            parts = [p async for p in lg.runs.stream(None, AGENT, input=human("streamed"))]
            assert types(parts[-2].data) == ["human", "ai", "tool", "ai"]
            tag = uuid.uuid4().hex[:8]
            for _ in range(3):
                await lg.threads.create(metadata={"count": tag})
            assert await lg.threads.count(metadata={"count": tag}) == 3
        async with client(gateway, TENANT) as tenant:
            mine = await tenant.threads.create()
            assert mine["thread_id"].startswith("acme-")
            with pytest.raises(httpx.HTTPStatusError) as not_its_agent:
                await tenant.runs.wait(mine["thread_id"], AGENT, input=human("hi"))
            assert not_its_agent.value.response.status_code == 422
            others = await tenant.threads.search(limit=100)
            assert [t["thread_id"] for t in others] == [mine["thread_id"]]

    asyncio.run(scenario())


def test_an_interrupt_and_its_resume(gateway: Gateway, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with client(gateway) as lg:
            tid = (await lg.threads.create())["thread_id"]
            modes = ["values", "updates"]
            paying = f"pay {tmp_path / 'paid.txt'}"
            asked = [
                p
                async for p in lg.runs.stream(
                    tid, "durable", input=human(paying), stream_mode=modes
                )
            ]
            assert [p.event for p in asked][-3:] == ["updates", "values", "end"], asked
            interrupt = asked[-2].data["__interrupt__"][0]
            assert interrupt["value"]["action_requests"][0]["tool"] == "pay"
            assert asked[-3].data["__interrupt__"] == [interrupt]
            thread = await lg.threads.get(tid)
            assert thread["status"] == "interrupted"
            assert list(thread["interrupts"].values()) == [[interrupt]]
            state = await lg.threads.get_state(tid)
            assert state["interrupts"] == [interrupt] and state["next"] == ["tools"]

            resumed = [
                p
                async for p in lg.runs.stream(
                    tid, "durable", command={"resume": True}, stream_mode=modes
                )
            ]
            assert resumed[-1].event == "end", resumed
            final = [p.data for p in resumed if p.event == "values"][-1]
            assert types(final) == ["human", "ai", "tool", "ai"]
            assert final["messages"][-1]["content"] == "paid"
            assert (tmp_path / "paid.txt").read_text().startswith("pay 5")
            assert (await lg.threads.get(tid))["status"] == "idle"
            with pytest.raises(httpx.HTTPStatusError) as nothing:
                await lg.runs.wait(tid, "durable", command={"resume": True})
            assert nothing.value.response.status_code == 409

    asyncio.run(scenario())


def test_a_resume_that_edits_the_arguments(gateway: Gateway, tmp_path: Path) -> None:
    """LangChain's HumanInTheLoopMiddleware answer (``{"decisions": [{"type": "edit",
    "edited_action": {...}}]}``) runs the call with the edited arguments; edits the
    tool's schema refuses, or a count of decisions that does not match, are 422 and
    leave the run waiting."""
    paid = tmp_path / "edited.txt"

    async def scenario() -> None:
        async with client(gateway) as lg:
            tid = (await lg.threads.create())["thread_id"]
            await lg.runs.wait(tid, "durable", input=human(f"pay {paid}"))
            assert (await lg.threads.get(tid))["status"] == "interrupted"

            def edit(args: dict[str, Any]) -> dict[str, Any]:
                action = {"name": "pay", "args": args}
                return {"resume": {"decisions": [{"type": "edit", "edited_action": action}]}}

            for command, code in (
                (edit({"path": str(paid), "amount": "nine"}), "invalid_edit"),
                ({"resume": {"decisions": [{"type": "approve"}] * 2}}, "invalid_command"),
            ):
                with pytest.raises(httpx.HTTPStatusError) as refused:
                    await lg.runs.wait(tid, "durable", command=command)
                assert refused.value.response.status_code == 422
                assert refused.value.response.json()["code"] == code
            assert (await lg.threads.get(tid))["status"] == "interrupted"
            values = await lg.runs.wait(
                tid, "durable", command=edit({"path": str(paid), "amount": 9})
            )
            assert values["messages"][-1]["content"] == "paid"
            tool = [m for m in values["messages"] if m["type"] == "tool"][-1]
            assert "changed this call's arguments" in tool["content"], tool
            assert paid.read_text().startswith("pay 9 ")

    asyncio.run(scenario())


def test_the_javascript_sdk_streams_a_run(gateway: Gateway) -> None:
    seen = run_script(
        "agent_protocol_stream.mjs",
        gateway.url,
        KEY,
        AGENT,
        packages=("@langchain/langgraph-sdk",),
    )
    assert "messages" in seen["seen"] and "values" in seen["seen"]
    assert seen["last"] == seen["state"] == ["human", "ai", "tool", "ai"]
