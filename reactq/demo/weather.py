"""A weather assistant with one fake (deterministic, offline) tool, which takes half a
second as a real lookup would: the demo kills a worker while it runs."""

from __future__ import annotations

import asyncio
import hashlib

from reactq.worker import Agent, ToolMode, tool

LOOKUP_SECONDS = 0.5
CONDITIONS = ("sunny", "cloudy", "rainy", "windy", "foggy", "snowy")


@tool(read_only=True)
async def get_weather(city: str) -> dict[str, object]:
    """Get the current weather for a city.

    Args:
        city: The city's name, e.g. "Paris".
    """
    await asyncio.sleep(LOOKUP_SECONDS)
    # A stable hash (not hash(), which is salted per process) so every worker agrees.
    digest = hashlib.sha256(city.strip().lower().encode()).digest()
    return {
        "city": city.strip(),
        "temperature_c": digest[0] % 35 - 5,
        "conditions": CONDITIONS[digest[1] % len(CONDITIONS)],
    }


agent = Agent(
    name="weather",
    model="gpt-4o-mini",
    system_prompt=(
        "You are a weather assistant. Use the get_weather tool to look up the weather "
        "for any city the user asks about, then answer in one short sentence."
    ),
    tools=[get_weather],
    tool_mode=ToolMode.NATIVE,
)
