"""A weather agent whose every tool call waits for a person's approval.

Host it in a pool, from the repository's root (without OPENAI_* settings the
worker uses the offline demo model, which calls ``get_weather`` for "... in Paris")::

    reactq worker --agents examples.approvals:agent

then run this file: it submits a turn, approves the call the turn waits for, and
prints the answer::

    python examples/approvals.py "What's the weather in Paris?"
"""

from __future__ import annotations

import asyncio
import sys

from reactq import Agent, ApprovalRequestedEvent, Producer, tool


@tool(requires_approval=True)
async def get_weather(city: str) -> dict[str, object]:
    """Get the current weather for a city (a person approves each call)."""
    return {"city": city, "temp_c": 21, "conditions": "sunny"}


agent = Agent(name="careful-weather", tools=[get_weather])


async def main(question: str) -> None:
    async with Producer.from_env() as producer:
        handle = await producer.submit("approvals-demo", question, agent="careful-weather")
        async for event in handle.events():
            if isinstance(event, ApprovalRequestedEvent):
                for call in event.calls:  # no worker holds the turn while we decide
                    print(f"approving {call['tool']}({call['arguments']})")
                    await producer.approve(handle.turn_id, call["call_id"], note="looks fine")
            elif event.type == "final":
                print(event.text)


if __name__ == "__main__":
    asyncio.run(main(" ".join(sys.argv[1:]) or "What's the weather in Paris?"))
