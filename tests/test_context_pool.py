"""Long sessions that never overflow, through real workers against a scripted model
with a 3,000-token window: a 300-turn session (its turns submitted back to back, the
model answering at once), compaction into stored summaries, forks on either side of
a summary, the context gauge, a message too large for the window, and two workers
sharing a session's turns."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.producer.render import render
from reactq.shared.events import CompactedEvent, ErrorEvent, Event, UsageEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.context_policy import DEFAULT_SUMMARY_PROMPT
from reactq.worker.agent.llm.replies import prompt_tokens
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.context_agents import WINDOW, model
from tests.helpers import WorkerPool, wait_until

pytestmark = pytest.mark.e2e

TURNS = 300
FACT = "FACT: the door code is 4417"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    scripted = ScriptedServer(model, context_window=WINDOW, max_requests=5000).start_in_thread()
    yield scripted
    scripted.stop()


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str,
    namespace: str,
    tmp_path_factory: pytest.TempPathFactory,
    server: ScriptedServer,
) -> Iterator[dict[str, str]]:
    tmp: Path = tmp_path_factory.mktemp("context")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-ctx",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
    }
    pool = WorkerPool(env, tmp, agents="tests.context_agents:agent", concurrency=4)
    try:
        pool.start(2)
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 2)
        yield env
    finally:
        pool.stop()


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


def sid() -> str:
    return f"ctx-{uuid.uuid4().hex[:10]}"


def filler(i: int) -> str:
    return f"turn {i}: " + "lorem ipsum " * 35  # about 110 tokens


async def events_of(producer: Producer, turn_id: str) -> list[Event]:
    """The turn's events once the audit log holds its final (it is written after)."""
    found: list[Event] = []

    async def done() -> bool:
        found[:] = await producer.turn_events(turn_id)
        return any(e.type == "final" for e in found)

    await wait_until(done, 30, f"the audit log of {turn_id}")
    return found


async def say(producer: Producer, session: str, text: str) -> tuple[str, str, str]:
    handle = await producer.submit(session, text, agent="ctx-long")
    final = await handle.result(timeout=60)
    return handle.turn_id, final.status, final.text


async def test_a_long_session_stays_inside_the_window_and_keeps_turn_ones_fact(
    producer: Producer, server: ScriptedServer
) -> None:
    s = sid()
    start = len(server.requests)
    sent = [FACT, *(filler(i) for i in range(2, TURNS)), "recall what you know"]
    # Back to back: the session's turns queue and one worker runs them in order.
    handles = [await producer.submit(s, text, agent="ctx-long") for text in sent]
    final = await handles[-1].result(timeout=240)
    assert final.status == "completed"
    assert FACT in final.text  # turn 1's fact reached the model through the summaries
    compactions = 0
    for turn, handle in enumerate(handles, 1):
        events = await events_of(producer, handle.turn_id)
        (ended,) = [e for e in events if e.type == "final"]
        assert ended.status == "completed", (turn, ended)
        compactions += sum(isinstance(e, CompactedEvent) for e in events)
        usage = [e for e in events if isinstance(e, UsageEvent)]
        assert usage and all(e.context_window == WINDOW for e in usage)
        assert all(e.context_tokens and e.context_percent is not None for e in usage)
    # The live view (`reactq watch`) shows the gauge as a line of its own.
    gauge = render(usage[-1])
    assert gauge is not None and f"% of {WINDOW:,} tokens" in gauge, gauge
    requests = server.requests[start:]
    assert len(requests) == TURNS + compactions  # one call a turn, one a summary
    summary_calls = [
        i for i, r in enumerate(requests) if r["messages"][0]["content"] == DEFAULT_SUMMARY_PROMPT
    ]
    assert len(summary_calls) == compactions >= 10
    sizes = [prompt_tokens(r) for r in requests]
    assert max(sizes) <= WINDOW  # never refused, never over
    # After the first compaction every turn's request stays under a fixed size.
    turns_after = [sizes[i] for i in range(summary_calls[0] + 1, len(requests))]
    assert max(turns_after) <= 0.85 * WINDOW
    history = await producer.history(s)
    summaries = [m for m in history if m.summary_of is not None]
    assert len(summaries) == compactions
    # The full history stays readable: every turn's message and answer, in order.
    users = [m.content for m in history if m.role == "user" and m.summary_of is None]
    assert users == sent
    assert sum(m.role == "assistant" for m in history) == TURNS
    # Turn 300's request holds turn 1's fact only through a summary.
    last = requests[-1]["messages"]
    assert last[-1]["content"] == "recall what you know"
    assert all(m["content"] != FACT for m in last)
    assert any(m["content"].startswith("[Summary") and FACT in m["content"] for m in last)


def request_ending_with(server: ScriptedServer, text: str) -> list[dict[str, Any]]:
    """The messages of the latest request whose last message is ``text``."""
    return next(
        r["messages"] for r in reversed(server.requests) if r["messages"][-1]["content"] == text
    )


async def test_forks_before_and_after_a_summary(producer: Producer, server: ScriptedServer) -> None:
    s = sid()
    # Turns of about 110 tokens reach compact_at (75 % of 3,000) in about 20 turns.
    sent = [FACT, *(filler(i) for i in range(2, 40))]
    handles = [await producer.submit(s, text, agent="ctx-long") for text in sent]
    assert (await handles[-1].result(timeout=120)).status == "completed"
    history = await producer.history(s)
    position = next((m.sequence for m in history if m.summary_of is not None), None)
    assert position is not None, "no compaction in 40 turns"
    # Before: two turns before the summary, the model reads the whole history.
    await producer.fork(s, position - 3, new_branch="before")
    _, status, text = await say(producer, s, "recall before")
    request = request_ending_with(server, "recall before")
    assert status == "completed" and FACT in text
    assert any(m["content"] == FACT for m in request)  # turn 1 itself, not a summary
    assert not any(m["content"].startswith("[Summary") for m in request)
    # After: the branch starts from the summary.
    await producer.fork(s, position, branch="trunk", new_branch="after")
    _, status, text = await say(producer, s, "recall after")
    request = request_ending_with(server, "recall after")
    assert status == "completed" and FACT in text
    assert not any(m["content"] == FACT for m in request)
    assert request[1]["content"].startswith("[Summary")


async def test_a_message_too_large_ends_its_turn_and_the_next_turn_works(
    producer: Producer,
) -> None:
    s = sid()
    await say(producer, s, "hello")
    huge = "z" * (WINDOW * 5)
    turn_id, status, _ = await say(producer, s, huge)
    assert status == "error"
    (error,) = [e for e in await events_of(producer, turn_id) if isinstance(e, ErrorEvent)]
    assert error.code == "context_length_exceeded"
    assert f"{WINDOW}-token context window" in error.message
    assert "message 4 (user, this turn's message)" in error.message
    _, status, text = await say(producer, s, "recall after the big one")
    assert (status, text) == ("completed", "recalled: ")


async def test_two_workers_compacting_one_session_lose_no_message(producer: Producer) -> None:
    s = sid()
    sent = [f"c{i} " + "dolor sit amet " * 40 for i in range(24)]
    workers: set[str] = set()
    for pair in range(0, len(sent), 2):
        handles = [
            await producer.submit(s, text, agent="ctx-long") for text in sent[pair : pair + 2]
        ]
        finals = await asyncio.gather(*(h.result(timeout=60) for h in handles))
        assert [f.status for f in finals] == ["completed", "completed"]
        for handle in handles:
            events = await events_of(producer, handle.turn_id)
            workers.update(getattr(e, "worker", "") for e in events if e.type == "started")
    history = await producer.history(s)
    assert any(m.summary_of is not None for m in history)
    users = [m.content for m in history if m.role == "user" and m.summary_of is None]
    assert users == sent
    assert [m.sequence for m in history] == list(range(1, len(history) + 1))
    assert sum(m.role == "assistant" for m in history) == len(sent)
