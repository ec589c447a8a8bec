"""An orchestrator that hands each question to a weather agent, a child turn that
any worker hosting ``weather`` runs, and streams the child's progress.

Host both agents in a pool, from the repository's root (without OPENAI_* settings the
worker uses the offline demo model, which delegates to the first subagent)::

    reactq worker --agents examples.orchestrator:agents

then run this file: it submits a turn to the orchestrator and prints the tree as it
grows, then the answer::

    python examples/orchestrator.py "What's the weather in Paris?"
"""

from __future__ import annotations

import asyncio
import sys

from reactq import Agent, FinalEvent, Producer, SubagentEvent, tool


@tool(read_only=True)
async def get_weather(city: str) -> dict[str, object]:
    """Get the current weather for a city."""
    return {"city": city, "temp_c": 21, "conditions": "sunny"}


weather = Agent(name="weather", tools=[get_weather])
orchestrator = Agent(name="orchestrator", subagents=["weather"])
agents = [orchestrator, weather]


async def main(question: str) -> None:
    async with Producer.from_env() as producer:
        handle = await producer.submit("orchestrator-demo", question, agent="orchestrator")
        async for event in handle.events():
            if isinstance(event, SubagentEvent):  # the child's progress, live
                said = f": {event.text}" if event.text else ""
                print(f"{'  ' * event.depth}{event.agent} {event.event}{said}")
            elif isinstance(event, FinalEvent):
                print(event.text)
                for child in event.subagents or []:
                    print(f"  ({child['agent']}: {child['status']}, {child['usage']})")


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "What's the weather in Paris?"))
