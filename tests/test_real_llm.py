"""A small real model through a real `reactq worker` (issue 22, item 8): a tool-calling
turn in each tool mode (NATIVE, JSON, PROSE) and one streamed turn, the worker talking
to the model with the real openai SDK.

Runs only when ``REACTQ_TEST_LLM_URL`` names an OpenAI-compatible endpoint serving a
small real model (../shared/real-llm/README.md starts Qwen2.5 0.5B under llama.cpp's
server). Small models are not deterministic across builds: the agents sample at
temperature 0 with a fixed seed, and the tests assert what a user would check (the
tool was called for Paris, the answer uses the tool's result), not the wording.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from reactq.producer import Producer
from reactq.shared.events import ActionEvent, DeltaEvent, Event, FinalEvent
from reactq.shared.settings import Settings
from tests.helpers import WorkerPool

URL = os.environ.get("REACTQ_TEST_LLM_URL")

# A plain skip, not conftest's ``unavailable``: a real model is never among the
# services REACTQ_REQUIRE_SERVICES=1 demands (CI runs none), so its absence must not
# fail the run.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        not URL,
        reason=(
            "no real model: start one per ../shared/real-llm/README.md (llama-server on "
            "127.0.0.1:8013), then set REACTQ_TEST_LLM_URL=http://127.0.0.1:8013/v1"
        ),
    ),
]

QUESTION = "What is the weather in Paris?"
TIMEOUT = 240  # seconds a turn may take: the model runs on the CPU beside the suite


@pytest.fixture(scope="module")
def pool_env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("real-llm")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-real-llm",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "REACTQ_TEST_LLM_URL": URL or "",
        "OPENAI_API_KEY": "no-key",
    }
    with WorkerPool(env, tmp, agents="tests.real_llm_agents:agents", concurrency=2).running(1):
        yield env


@pytest.fixture
async def producer(pool_env: dict[str, str]) -> AsyncIterator[Producer]:
    async with Producer(Settings.from_env(pool_env)) as p:
        yield p


async def ask(producer: Producer, agent: str) -> tuple[FinalEvent, list[Event]]:
    """Submit the weather question to ``agent``; its final and every event of the turn,
    as a subscriber saw them."""
    handle = await producer.submit(f"real-{uuid.uuid4().hex[:8]}", QUESTION, agent=agent)
    async with asyncio.timeout(TIMEOUT):
        events = [event async for event in handle.events()]
    final = events[-1]
    assert isinstance(final, FinalEvent), events
    return final, events


def assert_used_the_tool(final: FinalEvent, events: list[Event]) -> None:
    """The turn completed, called get_weather for Paris, and answered with its result."""
    assert final.status == "completed", final
    calls = [(e.tool, e.args) for e in events if isinstance(e, ActionEvent)]
    assert ("get_weather", {"city": "Paris"}) in calls, calls
    # 17 °C and drizzle come only from the tool.
    assert "17" in final.text or "drizzle" in final.text.lower(), final.text


@pytest.mark.parametrize("agent", ["real-native", "real-json", "real-prose"])
async def test_each_tool_mode_calls_the_tool_and_answers_with_its_result(
    producer: Producer, agent: str
) -> None:
    final, events = await ask(producer, agent)
    assert_used_the_tool(final, events)
    assert sum(isinstance(e, FinalEvent) for e in events) == 1


async def test_a_streamed_turn_shows_only_the_answer_as_it_comes(producer: Producer) -> None:
    final, events = await ask(producer, "real-stream")
    assert_used_the_tool(final, events)
    shown = "".join(e.text for e in events if isinstance(e, DeltaEvent))
    # What a person watched is the answer itself, never the JSON envelope around it.
    assert shown == final.text
    assert '"action"' not in shown
