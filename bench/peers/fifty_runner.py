"""fifty-agent-sdk 1.12.0's side of bench/kernel.py (runs in its own virtualenv)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
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
from fifty_agent_sdk import (
    AgentLoop,
    AgentRunner,
    ChatMessage,
    ChatRequest,
    ChatResponse,
    FinalEvent,
    MemoryStateStore,
    OpenAICompatibleClient,
    PromptSections,
    Registry,
    SafetyConfig,
    ToolCall,
    ToolMode,
    Usage,
    tool,
)


@tool(description="The weather in a city.")
async def get_weather(city: str) -> str:
    return f"sunny, 18 C in {city}"


@tool(description="The time in a zone.")
async def get_time(tz: str) -> str:
    return f"12:00 {tz}"


class ScriptedClient:
    """Stateless: the step comes from the number of tool messages."""

    def __init__(self, latency: float) -> None:
        self.latency = latency

    async def complete(self, request: ChatRequest) -> ChatResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        done = sum(1 for m in request.messages if m.role == "tool")
        step = step_for(done)
        usage = Usage(prompt_tokens=50, completion_tokens=10, total_tokens=60)
        if step is None:
            message = ChatMessage(role="assistant", content=FINAL_TEXT)
            return ChatResponse(message=message, usage=usage, finish_reason="stop")
        name, args = step
        call = ToolCall(name=name, args=args, id=f"call_{done}")
        message = ChatMessage(role="assistant", content="", tool_calls=[call])
        return ChatResponse(message=message, usage=usage, finish_reason="tool_calls")

    async def stream(self, request: ChatRequest) -> AsyncIterator[ChatResponse]:
        yield await self.complete(request)


def quiet_logs() -> None:
    """fifty logs every run through structlog; production users filter it, so do we."""
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


async def main() -> None:
    args = parse_args()
    quiet_logs()
    llm: Any = (
        OpenAICompatibleClient(api_key="sk-bench", base_url=args.base_url, max_retries=0)
        if args.mode == "http"
        else ScriptedClient(args.latency)
    )
    registry = Registry()
    registry.register(get_weather)
    registry.register(get_time)
    loop = AgentLoop(
        llm=llm,
        registry=registry,
        prompts=PromptSections(persona="You are a helpful assistant."),
        safety=SafetyConfig(max_iterations=10),
        model="bench-model",
        tool_mode=ToolMode.NATIVE,
    )
    question = "Weather and time in Paris?"
    if args.scenario == "loop":

        async def turn(i: int) -> None:
            final = None
            async for event in loop.run([ChatMessage(role="user", content=question)]):
                if isinstance(event, FinalEvent):
                    final = event
            assert final is not None and final.text == FINAL_TEXT, final

    else:
        runner = AgentRunner(loop=loop, state=MemoryStateStore())

        async def turn(i: int) -> None:
            final = None
            async for event in runner.run(session_key(i, args.session_turns), question):
                if isinstance(event, FinalEvent):
                    final = event
            assert final is not None and final.text == FINAL_TEXT, final

    result = await (measure_http(turn, args) if args.mode == "http" else measure(turn, args))
    name = "fifty AgentLoop" if args.scenario == "loop" else "fifty AgentRunner+Memory"
    emit({"framework": name, "scenario": args.scenario, "mode": args.mode, **result})


if __name__ == "__main__":
    asyncio.run(main())
