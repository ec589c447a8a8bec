"""Fallback models (issue 22, item 1): a provider failure the client could not retry
away moves the turn to the next model, for the rest of the turn, with a
``model_fallback`` event; usage and cost are per model. Against the scripted server
over HTTP, through the openai SDK (the pool's case is in test_model_endpoints.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from reactq import Agent, ModelPrice, tool
from reactq.shared.events import Event, FinalEvent, ModelFallbackEvent, UsageEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer
from reactq.worker.definitions import AgentConfigError
from reactq.worker.local import run_local_turn

USAGE = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100}


@tool(read_only=True)
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


def by_model(failures: dict[str, Reply]) -> Callable[[dict[str, Any]], Reply]:
    """A model per name: the failing ones answer their failure, the others look up
    once and then answer."""

    def handler(request: dict[str, Any]) -> Reply:
        failure = failures.get(request["model"])
        if failure is not None:
            return failure
        if request["messages"][-1]["role"] == "user":
            return Reply.tool_calls([("lookup", {"key": "k"})], usage=USAGE)
        return Reply.text(f"answered by {request['model']}", usage=USAGE)

    return handler


async def run(
    tmp_path: Path, server: ScriptedServer, **knobs: Any
) -> tuple[FinalEvent, list[Event]]:
    settings = Settings.from_env(
        {"REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}"}
    )
    agent = Agent(
        name="fallible",
        model="small",
        base_url=server.base_url,
        tools=[lookup],
        max_retries=0,
        **knobs,
    )
    events: list[Event] = []
    final = await run_local_turn(settings, agent, "s", "look it up", on_event=events.append)
    return final, events


FAILURES = {
    "5xx": (Reply.error(503, "overloaded"), "llm_server_error"),
    "429": (Reply.error(429, "slow down", {"retry-after": "0"}), "llm_rate_limited"),
    "context": (
        Reply.error(400, "This model's maximum context length is 8192 tokens"),
        "context_length_exceeded",
    ),
    "timeout": (Reply.text("late").but(delay=2), "llm_connection"),
}


@pytest.mark.parametrize("failure", sorted(FAILURES))
async def test_a_failing_model_hands_the_turn_to_the_next(tmp_path: Path, failure: str) -> None:
    reply, code = FAILURES[failure]
    async with ScriptedServer(by_model({"small": reply})) as server:
        final, events = await run(
            tmp_path, server, fallback_models=["medium", "large"], timeout=0.5
        )
        models = [r["model"] for r in server.requests]
    assert (final.status, final.text) == ("completed", "answered by medium")
    # Once moved, the turn stays: the second call goes straight to the fallback.
    assert models == ["small", "medium", "medium"]
    (switch,) = [e for e in events if isinstance(e, ModelFallbackEvent)]
    assert (switch.from_model, switch.to_model, switch.code) == ("small", "medium", code)
    assert [e.model for e in events if isinstance(e, UsageEvent)] == ["medium", "medium"]


async def test_each_model_fails_in_turn_until_one_answers(tmp_path: Path) -> None:
    failing = {"small": Reply.error(500, "down"), "medium": Reply.error(502, "down too")}
    async with ScriptedServer(by_model(failing)) as server:
        final, events = await run(tmp_path, server, fallback_models=["medium", "large"])
    assert final.text == "answered by large"
    switches = [(e.from_model, e.to_model) for e in events if isinstance(e, ModelFallbackEvent)]
    assert switches == [("small", "medium"), ("medium", "large")]


async def test_without_a_model_left_the_turn_ends_with_the_last_failure(tmp_path: Path) -> None:
    failing = {"small": Reply.error(500, "down"), "medium": Reply.error(429, "busy")}
    async with ScriptedServer(by_model(failing)) as server:
        final, events = await run(tmp_path, server, fallback_models=["medium"])
    assert (final.status, final.code) == ("error", "llm_rate_limited")
    assert len([e for e in events if isinstance(e, ModelFallbackEvent)]) == 1


async def test_a_refusal_that_another_model_would_repeat_ends_the_turn(tmp_path: Path) -> None:
    async with ScriptedServer(by_model({"small": Reply.error(401, "bad key")})) as server:
        final, events = await run(tmp_path, server, fallback_models=["medium"])
        assert [r["model"] for r in server.requests] == ["small"]
    assert final.code == "llm_auth"
    assert not [e for e in events if isinstance(e, ModelFallbackEvent)]


async def test_usage_and_cost_are_counted_per_model(tmp_path: Path) -> None:
    prices = {
        "small": ModelPrice(input_per_million=1.0, output_per_million=2.0),
        "medium": ModelPrice(input_per_million=10.0, output_per_million=20.0),
    }
    answers = iter([Reply.tool_calls([("lookup", {"key": "k"})], usage=USAGE)])

    def handler(request: dict[str, Any]) -> Reply:
        if request["model"] == "small":
            return next(answers, Reply.error(503, "gone"))
        return Reply.text("answered by medium", usage=USAGE)

    async with ScriptedServer(handler) as server:
        final, events = await run(
            tmp_path, server, fallback_models=["medium"], prices=prices, max_cost=1.0
        )
    usage = [(e.model, e.cost) for e in events if isinstance(e, UsageEvent)]
    assert usage == [("small", pytest.approx(0.0012)), ("medium", pytest.approx(0.012))]
    assert final.cost == pytest.approx(0.0132)
    assert final.usage["total_tokens"] == 2200


def test_a_cost_cap_needs_every_models_price() -> None:
    with pytest.raises(AgentConfigError, match="max_cost needs the price of model 'medium'"):
        Agent(
            name="a",
            model="small",
            fallback_models=["medium"],
            max_cost=1.0,
            prices={"small": ModelPrice(input_per_million=1.0, output_per_million=1.0)},
        )


def test_fallback_models_are_names_or_models() -> None:
    with pytest.raises(AgentConfigError, match="fallback_models must be a list"):
        Agent(name="a", fallback_models="medium")
    with pytest.raises(AgentConfigError, match="fallback_models takes model names or Model"):
        Agent(name="a", fallback_models=[3])
