"""neosian 1.12.2's side of bench/kernel.py (runs in its own Python 3.12 virtualenv)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import (
    FINAL_TEXT,
    emit,
    measure,
    measure_http,
    parse_args,
    session_key,
    step_for,
)
from neosian import (
    Agent,
    AgentConfig,
    BaseLLMClient,
    CompletionResponse,
    Conversation,
    ConversationStore,
    ConversationTurn,
    Message,
    OpenAICompatible,
    Role,
    Tool,
    ToolCall,
    ToolResult,
    Usage,
    register_model,
)


@Tool(name="get_weather", description="The weather in a city.")
async def get_weather(city: str) -> ToolResult[str]:
    return ToolResult.ok(f"sunny, 18 C in {city}")


@Tool(name="get_time", description="The time in a zone.")
async def get_time(tz: str) -> ToolResult[str]:
    return ToolResult.ok(f"12:00 {tz}")


class ScriptedClient(BaseLLMClient):
    """Stateless: the step comes from the number of tool messages."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def complete(self, messages: list[Message], model: Any, *a: Any, **k: Any) -> Any:
        if self.latency:
            await asyncio.sleep(self.latency)
        done = sum(1 for m in messages if m.role == Role.TOOL)
        step = step_for(done)
        usage = Usage(input_tokens=50, output_tokens=10)
        if step is None:
            message = Message(role=Role.ASSISTANT, content=FINAL_TEXT)
            return CompletionResponse(message, usage, "bench-model", "stop")
        name, args = step
        call = ToolCall(id=f"call_{done}", name=name, arguments=dict(args))
        message = Message(role=Role.ASSISTANT, content=None, tool_calls=[call])
        return CompletionResponse(message, usage, "bench-model", "tool_calls")

    async def stream(self, *a: Any, **k: Any) -> AsyncIterator[Any]:  # type: ignore[override]
        raise NotImplementedError
        yield

    async def close(self) -> None:
        pass


class MemoryStore(ConversationStore):
    """A dict-backed ConversationStore (neosian ships file and Postgres ones)."""

    def __init__(self) -> None:
        self.turns: dict[str, list[ConversationTurn]] = {}

    async def append_turn(
        self, conversation_id: str, messages: Sequence[Message], *, actor: str | None = None
    ) -> ConversationTurn:
        turns = self.turns.setdefault(conversation_id, [])
        turn = ConversationTurn(
            conversation_id, len(turns) + 1, tuple(messages), datetime.now(UTC), actor
        )
        turns.append(turn)
        return turn

    async def read_turns(
        self, conversation_id: str, *, after: int = 0, limit: int | None = None
    ) -> tuple[ConversationTurn, ...]:
        found = [t for t in self.turns.get(conversation_id, ()) if t.turn > after]
        return tuple(found[:limit] if limit is not None else found)

    async def last_turn_number(self, conversation_id: str) -> int:
        return len(self.turns.get(conversation_id, ()))

    async def list_conversations(self, *a: Any, **k: Any) -> Any:
        return tuple(self.turns)

    async def search_turns(self, query: str, **k: Any) -> tuple[ConversationTurn, ...]:
        return ()

    async def append_projections(self, conversation_id: str, entries: Sequence[Any]) -> None:
        pass

    async def read_projections(self, conversation_id: str, **k: Any) -> tuple[Any, ...]:
        return ()


async def main() -> None:
    args = parse_args()
    door = OpenAICompatible(name="bench", api_key_env=None, base_url=args.base_url or "http://x")
    model = register_model(
        "bench-model", provider=door, context_window=128_000, max_output_tokens=16_384
    )
    factory = None if args.mode == "http" else (lambda m: ScriptedClient(args.latency))
    config = AgentConfig(
        system_prompt="You are a helpful assistant.",
        tools=[get_weather, get_time],
        model=model,
        enable_todo=False,
        max_retries=0,
        client_factory=factory,
    )
    agent = Agent(config)
    question = "Weather and time in Paris?"
    if args.scenario == "loop":

        async def turn(i: int) -> None:
            response = await agent.run([Message(role=Role.USER, content=question)], stream=False)
            assert response.message.content == FINAL_TEXT, response

    else:
        store = MemoryStore()

        async def turn(i: int) -> None:
            sid = session_key(i, args.session_turns)
            conversation = Conversation(agent, store=store, conversation_id=sid)
            response = await conversation.send(question)
            assert response.message.content == FINAL_TEXT, response

    result = await (measure_http(turn, args) if args.mode == "http" else measure(turn, args))
    name = "neosian Agent.run" if args.scenario == "loop" else "neosian Conversation+store"
    emit({"framework": name, "scenario": args.scenario, "mode": args.mode, **result})


if __name__ == "__main__":
    asyncio.run(main())
