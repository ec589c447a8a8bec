"""A long session whose summary call fails (reactq issue 28, item 5), through real
workers against a scripted model with a 3,000-token window that answers 500 to every
summary call: no compaction can run, so each turn over ``compact_at`` leaves the
oldest whole turns out of its request (a ``turns_left_out`` event names them), they
stay in the history, and every turn completes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.producer.render import render
from reactq.shared.events import CompactedEvent, Event, TurnsLeftOutEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.context_policy import DEFAULT_SUMMARY_PROMPT
from reactq.worker.agent.llm.replies import prompt_tokens
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from tests.context_agents import WINDOW
from tests.context_agents import model as answer
from tests.helpers import WorkerPool, wait_until

pytestmark = pytest.mark.e2e

TURNS = 40


def model(request: Mapping[str, Any]) -> Reply:
    """The context tests' model, except that a summary call gets a 500."""
    if request["messages"][0]["content"] == DEFAULT_SUMMARY_PROMPT:
        return Reply.error(500, {"error": {"message": "the summariser is down"}})
    return answer(request)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer(model, context_window=WINDOW, max_requests=2000).start_in_thread()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str,
    namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
    server: ScriptedServer,
) -> Iterator[dict[str, str]]:
    tmp: Path = tmp_path_factory.mktemp("context-fallback")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-ctxfb",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        # The SDK would retry each 500 after a back-off; once is what the test needs.
        "REACTQ_LLM_MAX_RETRIES": "0",
    }
    pool = WorkerPool(env, tmp, agents="tests.context_agents:agent", concurrency=4)
    try:
        pool.start(1)
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 1)
        yield env
    finally:
        pool.stop()


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


async def events_of(producer: Producer, turn_id: str) -> list[Event]:
    """The turn's events once the audit log holds its final (it is written after)."""
    found: list[Event] = []

    async def done() -> bool:
        found[:] = await producer.turn_events(turn_id)
        return any(e.type == "final" for e in found)

    await wait_until(done, 30, f"the audit log of {turn_id}")
    return found


def filler(i: int) -> str:
    return f"turn {i}: " + "lorem ipsum " * 35  # about 110 tokens


async def test_a_failing_summary_leaves_old_turns_out_and_every_turn_completes(
    producer: Producer, server: ScriptedServer
) -> None:
    session = f"ctxfb-{uuid.uuid4().hex[:10]}"
    start = len(server.requests)
    sent = [filler(i) for i in range(1, TURNS + 1)]
    handles = [await producer.submit(session, text, agent="ctx-long") for text in sent]
    await handles[-1].result(timeout=240)
    turn_ids = [h.turn_id for h in handles]
    left_out: list[TurnsLeftOutEvent] = []
    for turn, handle in enumerate(handles, 1):
        events = await events_of(producer, handle.turn_id)
        (ended,) = [e for e in events if e.type == "final"]
        assert ended.status == "completed", (turn, ended, [e for e in events if e.type == "error"])
        assert not any(isinstance(e, CompactedEvent) for e in events)
        left_out += [e for e in events if isinstance(e, TurnsLeftOutEvent)]
    assert left_out, "no turn left anything out"
    for event in left_out:
        position = turn_ids.index(event.turn_id)
        # Whole turns, the oldest first, all before the turn that left them out.
        assert event.turn_ids == turn_ids[: len(event.turn_ids)]
        assert len(event.turn_ids) < position
        assert event.messages == 2 * len(event.turn_ids)  # a message and its answer each
        assert (event.from_sequence, event.up_to_sequence) == (1, event.messages)
        assert event.tokens_after < event.tokens_before
        assert event.reason == "llm_server_error" and event.model == "scripted"
    line = render(left_out[-1])
    assert line is not None and "left out" in line and "llm_server_error" in line, line

    requests = server.requests[start:]
    turns = [r for r in requests if r["messages"][0]["content"] != DEFAULT_SUMMARY_PROMPT]
    assert len(turns) == TURNS  # one model call a turn
    assert len(requests) - len(turns) == len(left_out)  # each after a failed summary call
    assert max(prompt_tokens(r) for r in turns) <= WINDOW
    # The last turn's request starts after the turns its event named.
    last = turns[-1]["messages"]
    dropped = len(left_out[-1].turn_ids)
    assert [m["content"] for m in last if m["role"] == "user"] == sent[dropped:]

    # The history keeps every message: no summary, no turn lost.
    history = await producer.history(session)
    assert [m.content for m in history if m.role == "user"] == sent
    assert [m.summary_of for m in history] == [None] * len(history)
    assert sum(m.role == "assistant" for m in history) == TURNS
    assert [m.sequence for m in history] == list(range(1, 2 * TURNS + 1))
