"""reactq's side of bench/kernel.py (runs in the project's .venv)."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.peers.common import (
    FINAL_TEXT,
    emit,
    measure,
    measure_http,
    parse_args,
    session_key,
    step_for,
)
from reactq.shared.bus import TurnEmitter
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.state.memory.store import MemoryStateStore
from reactq.worker.agent import (
    AgentLoop,
    AgentRunner,
    LLMResponse,
    LoopConfig,
    OpenAICompatibleClient,
    tool,
)
from reactq.worker.agent.llm.base import DeltaSink, RequestOptions
from reactq.worker.agent.tools import Registry


@tool
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny, 18 C in {city}"


@tool
async def get_time(tz: str) -> str:
    """The time in a zone."""
    return f"12:00 {tz}"


class NullBus:
    """Takes events and drops them: the loop's own cost, not a bus's."""

    async def publish(self, event: Any) -> Any:
        return event


class ScriptedClient:
    """Stateless: the step comes from the number of tool messages."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        tools: list[dict[str, Any]] | None,
        stream: bool = False,
        options: RequestOptions | None = None,
        on_delta: DeltaSink | None = None,
    ) -> LLMResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        done = sum(1 for m in messages if m["role"] == "tool")
        step = step_for(done)
        usage = {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
        if step is None:
            return LLMResponse(content=FINAL_TEXT, finish_reason="stop", usage=usage)
        name, _args = step
        arguments = '{"city": "Paris"}' if name == "get_weather" else '{"tz": "UTC"}'
        call = ToolCall(id=f"call_{done}", name=name, arguments=arguments)
        return LLMResponse(tool_calls=[call], finish_reason="tool_calls", usage=usage)


async def main() -> None:
    args = parse_args()
    bus = NullBus()
    http = args.mode == "http"
    llm: Any = (
        OpenAICompatibleClient(base_url=args.base_url, api_key="sk-bench", max_retries=0)
        if http
        else ScriptedClient(args.latency)
    )
    loop = AgentLoop(llm, Registry([get_weather, get_time]), LoopConfig(model="bench-model"))
    question = "Weather and time in Paris?"
    n = args.session_turns
    if args.scenario == "loop":
        histories: dict[str, list[ChatMessage]] = {}

        async def turn(i: int) -> None:
            history = histories.setdefault(session_key(i, n), []) if n > 1 else []
            emitter = TurnEmitter(bus, session_key(i, n), f"t{i}")  # type: ignore[arg-type]
            user = ChatMessage(role="user", content=question)
            result = await loop.run([*history, user], emitter)
            assert result.text == FINAL_TEXT, result
            if n > 1:
                history += [user, *result.messages]

    else:
        runner = AgentRunner(loop, MemoryStateStore(), "bench")

        async def turn(i: int) -> None:
            sid = session_key(i, n)
            emitter = TurnEmitter(bus, sid, f"t{i}")  # type: ignore[arg-type]
            final = await runner.run_turn(
                session_id=sid, message=question, turn_id=f"t{i}", emitter=emitter
            )
            assert final.text == FINAL_TEXT, final

    result = await (measure_http(turn, args) if http else measure(turn, args))
    if http:
        await llm.aclose()
    name = "reactq AgentLoop" if args.scenario == "loop" else "reactq AgentRunner+Memory"
    emit({"framework": name, "scenario": args.scenario, "mode": args.mode, **result})


if __name__ == "__main__":
    asyncio.run(main())
